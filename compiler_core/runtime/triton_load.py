"""The Triton backend's loading: the kernels' module exec'd once per content hash per process (Triton
caches its own binaries), in interpreter mode when the tensors live on the CPU."""

from __future__ import annotations

from typing import Any

from compiler_core import _compat
from compiler_core.codegen.artifacts import KernelSource
from compiler_core.codegen.triton.kernel import COMBINE_FUNCTIONS, HELPERS, INTERPRETER_HELPERS
from compiler_core.runtime import cache

_LOADED_TRITON: dict[str, dict[str, Any]] = {}


def triton_module_source(kernels: tuple[KernelSource, ...], interpret: bool) -> str:
    header = ["import triton", "import triton.language as tl"]
    if not interpret:
        header.append(_compat.libdevice_import())
    helpers = HELPERS + COMBINE_FUNCTIONS + (INTERPRETER_HELPERS if interpret else "")
    return "\n".join(header) + "\n" + helpers + "\n\n" + "\n\n\n".join(k.source for k in kernels) + "\n"


def triton_module(kernels: tuple[KernelSource, ...], interpret: bool) -> tuple[str, str]:
    """(digest, text) of the kernels' module: what load_triton execs, and compile workers exec too."""
    source = triton_module_source(kernels, interpret)
    return cache.digest(source, str(interpret), cache.runtime_identity("cpu" if interpret else "cuda")), source


def load_triton(kernels: tuple[KernelSource, ...],
                interpret: bool) -> tuple[dict[str, Any], bool, tuple[str, str]]:
    """(the module's namespace, whether this process had it loaded already, its (digest, text))."""
    key, source = triton_module(kernels, interpret)
    if key in _LOADED_TRITON:
        return _LOADED_TRITON[key], True, (key, source)
    # The file is for people (and tools) reading the kernels; it is never read back: what runs is the
    # in-memory text, which linecache serves to Triton's JIT and to tracebacks under this name.
    path = cache.cache_subdir("triton") / f"{key}.py"
    cache.write_atomic(path, source.encode())
    namespace = _compat.exec_triton_module(source, str(path), interpret)
    _LOADED_TRITON[key] = namespace
    return namespace, False, (key, source)


class Quiet:
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
