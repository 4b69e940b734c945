"""Load a graph's kernels (C++: cpp_build.py builds the shared object, loaded here with ctypes;
Triton: triton_load.py), then exec the host program around them -> CompiledArtifact."""

from __future__ import annotations

import ctypes
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch

from compiler_core.codegen.artifacts import KernelSource, WrapperProgram
from compiler_core.ir.graph import LoopGraph
from compiler_core.runtime import cache, cpp_bindings, host
from compiler_core.runtime.artifacts import CompiledArtifact
from compiler_core.runtime.check import KernelChecker
from compiler_core.runtime.cpp_build import BuildError, build_cpp
from compiler_core.runtime.cudagraphs import CudaGraphRunner, cudagraph_skip_reason
from compiler_core.runtime.kernel_errors import error_check, raising_kernel_errors
from compiler_core.runtime.triton_launch import FastKernel, JitKernel, fast_launch_supported
from compiler_core.runtime.triton_load import Quiet, load_triton

__all__ = ["BuildError", "LoadedKernels", "build_program", "cache_dir", "host_call", "load_kernels"]


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
    # Triton: the (digest, text) of the module the kernels were exec'd from (compile workers exec it too).
    triton_module: Optional[tuple[str, str]] = field(default=None, repr=False)


def load_kernels(kernels: tuple[KernelSource, ...], backend: str, graph: LoopGraph) -> LoadedKernels:
    if not kernels:
        return LoadedKernels({}, True)
    if backend == "cpp":
        library, cache_hit = build_cpp(kernels)
        lib = ctypes.CDLL(str(library))
        # The kernels' FASTCALL entry points where the object has them (cpp_bindings.py: a launch
        # costs about 0.1 us there, 0.9 us through ctypes); ctypes otherwise.
        fast = cpp_bindings.load_module(str(library)) if hasattr(lib, f"PyInit_{cpp_bindings.MODULE}") else None
        functions = {}
        for k in kernels:
            if fast is not None:
                functions[k.name] = getattr(fast, k.name)
                continue
            fn = getattr(lib, k.name)
            fn.argtypes = [ctypes.c_void_p] * len(k.signature) + [ctypes.c_int64] * len(k.size_args) + [ctypes.c_int]
            fn.restype = None
            functions[k.name] = fn
        check = None
        if any(k.checks_int_div for k in kernels):
            lib.fc_take_error.restype = ctypes.c_int
            check = error_check(lib.fc_take_error)
        return LoadedKernels(functions, cache_hit, str(library), check)
    interpret = graph.device != "cuda"
    loaded, cache_hit, module = load_triton(kernels, interpret=interpret)
    check = error_check(loaded["fc_take_error"]) if any(k.checks_int_div for k in kernels) else None
    if interpret:
        wrap = Quiet
    elif fast_launch_supported() and os.environ.get("FCOMPILE_TRITON_LAUNCH", "direct") != "jit":
        wrap = FastKernel  # later launches through the compiled binary: triton_launch.py says why
    else:
        wrap = JitKernel
    return LoadedKernels({name: wrap(loaded[name]) for k in kernels for name in k.function_names}, cache_hit,
                         error_check=check, triton_module=module)


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
        "alloc": host.allocator(graph.device),
    }
    if checker is not None:
        namespace["checker"] = checker
    for node in graph.nodes:  # custom ops of ours called as Python functions (ExternCall.host_function)
        if node.kind == "extern" and node.extern.host_function:
            namespace[node.extern.host_function] = node.extern.op.fcompile_host_function
    exec(compile(wrapper.source, f"<fcompile host program {_digest(wrapper.source)}>", "exec"), namespace)
    return namespace["call"]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
