"""libdevice in our GPU kernels as in eager's: the same version, and square roots rounded to nearest.

Eager's CUDA kernels call the libdevice of the CUDA toolkit torch was built with; Triton links a copy of
its own, of another CUDA release. On an H100 (torch 2.11 built with CUDA 13.0, Triton 3.6) float32
asinh, acosh, atan2, erf and pow differed from eager's in 5% to 34% of 4 million random values, by up
to 2 ulp; linked with CUDA 13.0's own libdevice, all ten functions probed (those, hypot, log1p, tanh,
sin, atanh) gave eager's values bit for bit (2026-12-06). `toolkit_libdevice` finds the toolkit's
libdevice where a CUDA toolkit of torch's version is installed (nvcc's `nvvm/libdevice`), and
`compile_options` is the Triton option that links it, given at each compile of our kernels (so
Triton's caches key the binary by it; Inductor's kernels keep Triton's copy). Without such a toolkit
Triton's copy is linked: values within a few ulp of eager's, as Inductor's are.

Square roots: see below.

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

import json
import os
import re
import warnings
from typing import Any, Mapping, Optional

APPROXIMATE = re.compile(r"(?<![\w.])sqrt\.approx\.f32(?![\w.])")
ROUNDED = "sqrt.rn.f32"
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$][\w$]*)")
_ours: set[str] = set()  # the kernels (entry names) whose PTX is rewritten
_installed: list[bool] = []  # once per process


def toolkit_libdevice(cuda_version: Optional[str], environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The libdevice of an installed CUDA toolkit whose release is `cuda_version` (torch.version.cuda,
    "13.0"), or None. FCOMPILE_LIBDEVICE names a file to use instead ("" or "triton": Triton's copy)."""
    chosen = environ.get("FCOMPILE_LIBDEVICE")
    if chosen is not None:
        if chosen in ("", "triton"):
            return None
        if not os.path.isfile(chosen):
            warnings.warn(f"FCOMPILE_LIBDEVICE={chosen!r} is not a file: our GPU kernels link Triton's libdevice "
                          "(name a libdevice.10.bc, or 'triton')", stacklevel=2)
            return None
        return chosen
    if not cuda_version:
        return None
    homes = [environ.get("CUDA_HOME"), environ.get("CUDA_PATH"), f"/usr/local/cuda-{cuda_version}", "/usr/local/cuda"]
    for home in dict.fromkeys(h for h in homes if h):
        path = os.path.join(home, "nvvm", "libdevice", "libdevice.10.bc")
        if os.path.isfile(path) and _release(home) == cuda_version:
            return path
    return None


def _release(home: str) -> Optional[str]:
    """A CUDA toolkit's release ("13.0") from its version.json (CUDA 11.1 and later)."""
    try:
        with open(os.path.join(home, "version.json")) as f:
            version = json.load(f)["cuda"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ".".join(str(version).split(".")[:2])


def compile_options(libdevice: Optional[str]) -> dict[str, Any]:
    """Triton's compile option that links this libdevice ({} for Triton's own)."""
    return {"extern_libs": (("libdevice", libdevice),)} if libdevice else {}


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
