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
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch

from compiler_core import _compat
from compiler_core.codegen.artifacts import KernelSource, WrapperProgram
from compiler_core.codegen.cpp.prelude import PRELUDE
from compiler_core.codegen.triton.kernel import HELPERS, INTERPRETER_HELPERS, MUL_COMBINE
from compiler_core.ir.graph import LoopGraph
from compiler_core.runtime import cache, host
from compiler_core.runtime.artifacts import CompiledArtifact
from compiler_core.runtime.check import KernelChecker
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
    """The kernel cache, checked to be the user's alone (else a private temporary one): see cache.py."""
    return cache.cache_root()


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
    return LoadedKernels({name: _Quiet(loaded[name]) if interpret else loaded[name]
                          for k in kernels for name in k.function_names}, cache_hit, error_check=check)


def build_program(loaded: LoadedKernels, kernels: tuple[KernelSource, ...], wrapper: WrapperProgram,
                  graph: LoopGraph, mode: str, configs: dict[str, dict], tuning_log: tuple[str, ...],
                  checker: Optional[KernelChecker] = None) -> CompiledArtifact:
    """exec the host program with the loaded kernels (and, in the check mode, the checker) in scope."""
    call = host_call(wrapper, loaded.functions, graph, checker)
    cudagraph = cudagraph_skip_reason(mode, graph.device)
    if cudagraph is None and checker is not None:  # the check reads tensors between launches
        cudagraph = "not used: the check mode compares every kernel with eager PyTorch"
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
                            cudagraph=cudagraph, checker=checker)


def host_call(wrapper: WrapperProgram, kernels: dict[str, Any], graph: LoopGraph,
              checker: Optional[KernelChecker] = None) -> Any:
    """exec the printed host program with exactly the names it may use (codegen/wrapper.py)."""
    namespace: dict[str, Any] = {
        "torch": torch, "rt": host, "k": SimpleNamespace(**kernels), "consts": dict(graph.constants),
        "DEVICE": torch.device(graph.device), "NTHREADS": torch.get_num_threads(),
    }
    if checker is not None:
        namespace["checker"] = checker
    exec(compile(wrapper.source, f"<fcompile host program {_digest(wrapper.source)}>", "exec"), namespace)
    return namespace["call"]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cpp_translation_unit(kernels: tuple[KernelSource, ...]) -> str:
    return PRELUDE + "\n\n" + "\n\n".join(k.source for k in kernels) + "\n"


def build_cpp(kernels: tuple[KernelSource, ...]) -> tuple[Path, bool]:
    """Compile (or find in the cache) the shared object for these kernels: (path, cache_hit).

    A cached object is returned only when its bytes match the SHA-256 recorded when it was built
    (cache.py): a changed one is rebuilt, never loaded."""
    source = cpp_translation_unit(kernels)
    folder = cache.cache_subdir("cpp", cache.cpp_key(source, _toolchain()))
    target = folder / "kernels.so"
    if target.exists():
        state = cache.digest_state(target)
        if state == "ok":
            return target, True
        if state == "mismatch":
            warnings.warn(f"fcompile: {target} no longer matches the SHA-256 recorded when it was built; "
                          "it was not loaded and is being rebuilt", cache.CacheWarning, stacklevel=2)
    cache.write_atomic(folder / "kernels.cpp", source.encode())
    # Build beside the target and rename atomically: parallel processes may race on one key.
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=folder)
    os.close(fd)
    cmd = [_compiler(), *CXX_FLAGS, "-o", tmp, str(folder / "kernels.cpp")]
    result = subprocess.run(cmd + ["-lmvec"], capture_output=True, text=True)
    if result.returncode != 0:
        # Without glibc's libmvec (musl, macOS, old glibc) the math stays scalar.
        result = subprocess.run(cmd + ["-DFC_NO_LIBMVEC"], capture_output=True, text=True)
    if result.returncode != 0:
        os.unlink(tmp)
        raise BuildError("the C++ compiler rejected the generated code:\n" + result.stderr[-3000:])
    # Record first, then rename: a process racing on this key sees either no object or a recorded one.
    cache.write_atomic(cache.digest_record(target), cache.sha256_of(Path(tmp)).encode())
    os.replace(tmp, target)
    return target, False


def _toolchain() -> cache.Toolchain:
    compiler = _compiler()
    return cache.Toolchain(compiler=cache.resolve_compiler(compiler), version=_compiler_version(),
                           flags=tuple(CXX_FLAGS), native_target=cache.native_target(compiler),
                           machine=platform.machine())


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
    key = cache.digest(source, str(interpret), cache.runtime_identity("cpu" if interpret else "cuda"))
    if key in _LOADED_TRITON:
        return _LOADED_TRITON[key], True
    # The file is for people (and tools) reading the kernels; it is never read back: what runs is the
    # in-memory text, which linecache serves to Triton's JIT and to tracebacks under this name.
    path = cache.cache_subdir("triton") / f"{key}.py"
    cache.write_atomic(path, source.encode())
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
