"""libdevice's square roots in our GPU kernels rounded as eager's are: `sqrt.rn.f32`, not `sqrt.approx.f32`.

libdevice asks `__nvvm_reflect("__CUDA_PREC_SQRT")` inside its functions (hypotf, acoshf, asinhf,
sqrtf, ...) and takes `sqrt.rn.f32` where the answer is 1, `sqrt.approx.f32` where it is 0. nvcc, which
compiles eager's CUDA kernels, answers 1; Triton leaves it unset, which reads 0, so our hypot, complex
abs, acosh and asinh rounded differently from eager's (the PTX check in codegen/triton/ahead.py found
them). The answer is the only thing that differs: a probe of libdevice's hypot, asinh, acosh and sqrt
compiled both ways gave the same PTX but for those instructions (4 of each, 2026-12-06).

LLVM's `-nvvm-reflect-add=__CUDA_PREC_SQRT=1` sets the answer, but only where Triton's library exports
LLVM's C API (Triton 3.9 does, 3.6 does not), and it changes every kernel the process compiles,
Inductor's included (the benchmark compares with those). So instead the PTX stage of Triton's CUDA
backend is wrapped: in the kernels this process claimed as ours (`claim`), each `sqrt.approx.f32` becomes
`sqrt.rn.f32`; every other kernel is left as Triton made it. Our printer never writes an approximate
square root itself (it calls sqrt_rn), so the only ones in our PTX come from libdevice.

Triton's on-disk cache keys a binary by the function's text and options, not by this wrapper: the
printer writes a line naming it into each function that calls libdevice (codegen/triton/kernel.py).

Torch-free: the compile workers (runtime/compile_worker.py) load this file by path, importing Triton only.
"""

from __future__ import annotations

import re
from typing import Any

APPROXIMATE = re.compile(r"(?<![\w.])sqrt\.approx\.f32(?![\w.])")
ROUNDED = "sqrt.rn.f32"
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)")
_ours: set[str] = set()  # the kernels (entry names) whose PTX is rewritten
_installed: list[bool] = []  # once per process


def claim(namespace: dict[str, Any]) -> None:
    """Mark the Triton functions of one of our generated modules (an exec'd namespace) as ours."""
    for name, value in namespace.items():
        if type(value).__name__ == "JITFunction":
            _ours.add(name)


def rounded_as_eager(ptx: str) -> str:
    """One kernel's PTX with libdevice's square roots rounded to nearest, if it is one of ours."""
    entry = _ENTRY.search(ptx)
    if entry is None or entry.group(1) not in _ours:
        return ptx
    return APPROXIMATE.sub(ROUNDED, ptx)


def install() -> bool:
    """Wrap the PTX stage of Triton's CUDA backend (once per process). Whether it is in place: False
    without a CUDA-capable Triton, where nothing is compiled for a GPU."""
    if not _installed:
        _installed.append(_wrap_ptx_stage())
    return _installed[0]


def _wrap_ptx_stage() -> bool:
    try:
        from triton.backends.nvidia.compiler import CUDABackend
    except Exception:  # noqa: BLE001 - no Triton, or one without a CUDA backend
        return False
    global _ours
    original = CUDABackend.add_stages
    if hasattr(original, "fcompile_ours"):  # wrapped by another copy of this module: share its claims
        _ours = original.fcompile_ours
        return True

    def add_stages(self, stages, *args, **kwargs):
        original(self, stages, *args, **kwargs)
        make_ptx = stages.get("ptx")
        if make_ptx is not None:
            stages["ptx"] = lambda src, metadata: rounded_as_eager(make_ptx(src, metadata))

    add_stages.fcompile_ours = _ours
    CUDABackend.add_stages = add_stages
    return True
