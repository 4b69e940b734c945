"""Build and load a graph's kernels, then exec the host program around them -> CompiledArtifact.

C++: all kernels of a graph go into one translation unit, compiled once by the system compiler into
a shared object cached on disk by content hash (so a warm compile is a file lookup), loaded with
ctypes.  Triton: the kernels' module is exec'd once per content hash per process (Triton caches its
own binaries), in interpreter mode when the tensors live on the CPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from compiler_core import _compat
from compiler_core.codegen.artifacts import KernelSource, WrapperProgram
from compiler_core.codegen.cpp.prelude import PRELUDE
from compiler_core.codegen.triton.kernel import HELPERS, INTERPRETER_HELPERS, MUL_COMBINE
from compiler_core.ir.graph import LoopGraph
from compiler_core.runtime.artifacts import CompiledArtifact
from compiler_core.runtime.cudagraphs import CudaGraphRunner, cudagraph_skip_reason
from compiler_core.runtime.kernel_errors import error_check, raising_kernel_errors

CXX_FLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fno-math-errno"]
if platform.machine() in ("x86_64", "AMD64"):
    # GCC defaults to 256-bit vectors even where AVX-512 exists; full width measured 1.4x faster on
    # softmax (2048x1024, 2-core Xeon). Harmless on CPUs without AVX-512.
    CXX_FLAGS.append("-mprefer-vector-width=512")
_LOADED_TRITON: dict[str, dict[str, Any]] = {}


class BuildError(Exception):
    """The generated code did not compile; the graph falls back to eager PyTorch."""


def cache_dir() -> Path:
    root = os.environ.get("FCOMPILE_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "fcompile")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class LoadedKernels:
    """Callable kernels by name, ready for the host program's namespace."""

    functions: dict = field(repr=False)
    cache_hit: bool
    library_path: Optional[str] = None
    # Raises eager's error when a kernel flagged one (integer division by zero); None when no kernel can.
    error_check: Optional[Callable[[], None]] = field(default=None, repr=False)


def load_kernels(kernels: tuple[KernelSource, ...], backend: str, graph: LoopGraph) -> LoadedKernels:
    if not kernels:
        return LoadedKernels({}, True)
    if backend == "cpp":
        library, cache_hit = build_cpp(kernels)
        lib = ctypes.CDLL(str(library))
        functions = {}
        for k in kernels:
            fn = getattr(lib, k.name)
            fn.argtypes = [ctypes.c_void_p] * len(k.signature) + [ctypes.c_int]
            fn.restype = None
            functions[k.name] = fn
        check = None
        if any(k.checks_int_div for k in kernels):
            lib.fc_take_error.restype = ctypes.c_int
            check = error_check(lib.fc_take_error)
        return LoadedKernels(functions, cache_hit, str(library), check)
    interpret = graph.device != "cuda"
    loaded, cache_hit = load_triton(kernels, interpret=interpret)
    check = error_check(loaded["fc_take_error"]) if any(k.checks_int_div for k in kernels) else None
    return LoadedKernels({k.name: _Quiet(loaded[k.name]) if interpret else loaded[k.name] for k in kernels},
                         cache_hit, error_check=check)


def build_program(loaded: LoadedKernels, kernels: tuple[KernelSource, ...], wrapper: WrapperProgram,
                  graph: LoopGraph, mode: str, configs: dict[str, dict], tuning_log: tuple[str, ...]
                  ) -> CompiledArtifact:
    """exec the host program with the loaded kernels in scope."""
    namespace: dict[str, Any] = {
        "torch": torch, "empty_strided": torch.empty_strided, "DEVICE": torch.device(graph.device),
        "view": view, "ensure_layout": ensure_layout, "constants": graph.constants,
        "NTHREADS": torch.get_num_threads(), **loaded.functions,
    }
    exec(compile(wrapper.source, f"<fcompile host program {_digest(wrapper.source)}>", "exec"), namespace)
    call = namespace["call"]
    cudagraph = cudagraph_skip_reason(mode, graph.device)
    if cudagraph is None:
        sparse = [b.name for b in graph.inputs if not b.layout.is_dense()]
        if sparse:
            cudagraph = f"not used: input {sparse[0]} is not dense (broadcast or overlapping strides)"
        else:
            call = CudaGraphRunner(call)
            cudagraph = "used: the host program is replayed as one CUDA graph (captured on the first call)"
    if loaded.error_check is not None:  # kernels flag errors eager raises (integer division by zero)
        call = raising_kernel_errors(call, loaded.error_check)
    return CompiledArtifact(call=call, backend=wrapper.backend,
                            kernel_names=tuple(k.name for k in kernels), chosen_configs=configs,
                            tuning_log=tuning_log, cache_hit=loaded.cache_hit, library_path=loaded.library_path,
                            cudagraph=cudagraph)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cpp_translation_unit(kernels: tuple[KernelSource, ...]) -> str:
    return PRELUDE + "\n\n" + "\n\n".join(k.source for k in kernels) + "\n"


def build_cpp(kernels: tuple[KernelSource, ...]) -> tuple[Path, bool]:
    """Compile (or find in the cache) the shared object for these kernels: (path, cache_hit)."""
    source = cpp_translation_unit(kernels)
    key = _digest(source + " ".join(CXX_FLAGS) + _compiler_version())
    target = cache_dir() / "cpp" / key / "kernels.so"
    if target.exists():
        return target, True
    target.parent.mkdir(parents=True, exist_ok=True)
    (target.parent / "kernels.cpp").write_text(source)
    # Build beside the target and rename atomically: parallel processes may race on one key.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    cmd = [_compiler(), *CXX_FLAGS, "-o", tmp, str(target.parent / "kernels.cpp")]
    result = subprocess.run(cmd + ["-lmvec"], capture_output=True, text=True)
    if result.returncode != 0:
        # Without glibc's libmvec (musl, macOS, old glibc) the math stays scalar.
        result = subprocess.run(cmd + ["-DFC_NO_LIBMVEC"], capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp)
        raise BuildError("the C++ compiler rejected the generated code:\n" + result.stderr[-3000:])
    os.replace(tmp, target)
    return target, False


def _compiler() -> str:
    return os.environ.get("CXX", "g++")


_VERSION: dict[str, str] = {}


def _compiler_version() -> str:
    if "v" not in _VERSION:
        try:
            _VERSION["v"] = subprocess.run([_compiler(), "--version"], capture_output=True, text=True).stdout
        except OSError as exc:
            raise BuildError(f"no C++ compiler found ({_compiler()}): install g++ (apt-get install g++) "
                             "or use backend='triton'") from exc
    return _VERSION["v"]


def triton_module_source(kernels: tuple[KernelSource, ...], interpret: bool) -> str:
    header = ["import triton", "import triton.language as tl"]
    if not interpret:
        header.append(_compat.libdevice_import())
    helpers = HELPERS + MUL_COMBINE + (INTERPRETER_HELPERS if interpret else "")
    return "\n".join(header) + "\n" + helpers + "\n\n" + "\n\n\n".join(k.source for k in kernels) + "\n"


def load_triton(kernels: tuple[KernelSource, ...], interpret: bool) -> tuple[dict[str, Any], bool]:
    source = triton_module_source(kernels, interpret)
    key = _digest(source + str(interpret))
    if key in _LOADED_TRITON:
        return _LOADED_TRITON[key], True
    path = cache_dir() / "triton" / f"{key}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    namespace = _compat.exec_triton_module(source, str(path), interpret)
    _LOADED_TRITON[key] = namespace
    return namespace, False


class _Quiet:
    """An interpreted kernel whose masked-off lanes may compute inf - inf in numpy: silence those
    floating-point warnings (the lanes are never stored); the GPU computes them silently too."""

    def __init__(self, kernel: Any):
        self.kernel = kernel

    def __getitem__(self, grid: Any) -> Any:
        import numpy as np

        launch = self.kernel[grid]

        def run(*args: Any, **kwargs: Any) -> Any:
            with np.errstate(all="ignore"):
                return launch(*args, **kwargs)

        return run


# ---- helpers the host program calls ----------------------------------------------------------
def view(base: torch.Tensor, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    return base.as_strided(size, stride, base.storage_offset() + offset)


def ensure_layout(t: torch.Tensor, size: tuple, stride: tuple) -> torch.Tensor:
    """Extern calls usually return the strides torch's metadata promised; copy when they do not."""
    if tuple(t.stride()) == tuple(stride) or t.numel() <= 1:
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
