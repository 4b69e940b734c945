"""LLVM options for the GPU kernels this process compiles: the libdevice eager's kernels are linked with.

libdevice asks `__nvvm_reflect("__CUDA_PREC_SQRT")` inside its functions (hypotf, acoshf, asinhf,
sqrtf, ...). nvcc, which compiles eager's CUDA kernels, answers 1: sqrt.rn.f32. Triton leaves it unset,
which reads 0: sqrt.approx.f32, so our hypot, complex abs, acosh and asinh rounded differently from
eager's (the PTX check in codegen/triton/ahead.py found them). LLVM's `-nvvm-reflect-add` sets the
answer, through the C API that Triton's library exports.

Torch-free: the compile workers (runtime/compile_worker.py) load this file by path, importing Triton only.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import pathlib

OPTION = b"-nvvm-reflect-add=__CUDA_PREC_SQRT=1"
_state: list[bool] = []  # LLVM's options are process-wide: set once


@functools.lru_cache(maxsize=None)
def libtriton_path() -> pathlib.Path | None:
    """Triton's native library (its LLVM lives there), or None without a CUDA-capable Triton."""
    try:
        import triton
        from triton.backends import backends

        if "nvidia" not in backends:
            return None
    except Exception:  # noqa: BLE001 - no Triton, or an old one: nothing is compiled for a GPU
        return None
    path = pathlib.Path(triton.__file__).parent / "_C" / "libtriton.so"
    return path if path.exists() else None


@functools.lru_cache(maxsize=None)
def ieee_square_roots_supported() -> bool:
    """Whether this Triton's LLVM has `-nvvm-reflect-add` (its name is in the library's option table)."""
    library = libtriton_path()
    if library is None:
        return False
    try:
        with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as image:
            return image.find(b"nvvm-reflect-add\x00") >= 0
    except (OSError, ValueError):
        return False


def libdevice_with_ieee_square_roots() -> bool:
    """Link libdevice into this process's GPU kernels with IEEE square roots, as nvcc does for eager.
    Only where the option exists (LLVM exits the process on one it does not know). Whether it is set."""
    if not _state:
        done = False
        if ieee_square_roots_supported():
            try:
                argv = (ctypes.c_char_p * 2)(b"fcompile", OPTION)
                ctypes.CDLL(str(libtriton_path())).LLVMParseCommandLineOptions(2, argv, None)
                done = True
            except (OSError, AttributeError):  # a library without LLVM's C API exported
                pass
        _state.append(done)
    return _state[0]
