"""The one adapter that drives torch.compile with Inductor, for side-by-side views and benchmarks.

Nothing else in compiler_core imports torch._inductor (ARCHITECTURE.md). Submodules are imported
explicitly: on torch 2.13 `torch._inductor.compile_fx` is not an attribute after `import torch._inductor`.

    from compiler_core.compare.inductor import compile_with_inductor
    fast = compile_with_inductor(fn)          # torch.compile(fn, backend="inductor"), on a private copy of fn
    with inductor_output_code() as modules:   # the Python module Inductor generates per graph, as text
        fast(x)
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import types
from typing import Any, Callable, Iterator

import torch


def use_private_cache_dir(prefix: str = "fcompile-inductor-") -> str:
    """Point Inductor's on-disk caches at a new empty folder, so "cold" compile times are cold.

    Call before the first Inductor compilation in the process (some of its paths are computed once).
    Returns the folder; the caller may delete it at exit.
    """
    path = tempfile.mkdtemp(prefix=prefix)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    return path


def private_copy(fn: Callable) -> Callable:
    """A function equal to fn but with its own code object.

    Dynamo caches compilations per code object, and cc.compile() resets that cache for the code it
    compiles; a private copy keeps Inductor's and our compilations of the same program apart.
    """
    if isinstance(fn, types.FunctionType):
        copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__,
                                  fn.__closure__)
        copy.__kwdefaults__ = fn.__kwdefaults__
        copy.__qualname__ = fn.__qualname__
        return copy
    return fn


def compile_with_inductor(fn: Callable, mode: str = "default", dynamic: bool = False) -> Callable:
    """torch.compile(fn) with the Inductor backend, on a private copy of fn (see private_copy)."""
    import torch._inductor.compile_fx  # noqa: F401 - explicit submodule import (PITFALLS.md)

    return torch.compile(private_copy(fn), backend="inductor", mode=None if mode == "default" else mode,
                         dynamic=dynamic)


def inductor_kernels(fn: Callable, *args: Any) -> tuple[Any, tuple[str, ...]]:
    """Compile fn with Inductor, run it once on args: (its result, the names of the kernels Inductor
    generated), read from its generated code (`cpp_fused_*` on CPU, `triton_*` on GPU).

        out, names = inductor_kernels(lambda x: (x + 1).t().exp(), torch.randn(4, 6))
        len(names)   # 1
    """
    import re

    from torch._inductor.utils import run_and_get_code

    out, sources = run_and_get_code(compile_with_inductor(fn), *args)
    names = re.findall(r"\b(cpp_fused_\w+|triton_(?:poi|per|red|tem)_\w+)\b", "\n".join(sources))
    return out, tuple(dict.fromkeys(names))


@contextlib.contextmanager
def inductor_output_code() -> Iterator[list[str]]:
    """Collect the output code (wrapper and kernels, one Python module per graph) Inductor generates
    or loads from its cache inside the block.

    Reads Inductor's `output_code` artifact log: DEBUG records "Output code: ..." on its own logger,
    enabled here only, not propagated (nothing is printed), and restored afterwards.
    """
    import torch._inductor.codecache as codecache

    logger = getattr(codecache, "output_code_log", None) or logging.getLogger(
        "torch._inductor.codecache.__output_code")
    modules: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Output code:"):
                modules.append(message.split("\n", 1)[1] if "\n" in message else "")

    handler = Collect(logging.DEBUG)
    saved = (logger.level, logger.propagate, logger.disabled)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate, logger.disabled = False, False
    try:
        yield modules
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate, logger.disabled = saved[1], saved[2]


def inductor_versions() -> dict[str, Any]:
    """torch and (if installed) Triton versions, for benchmark records."""
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - Triton is optional on CPU-only installs
        triton_version = None
    return {"torch": torch.__version__, "triton": triton_version}
