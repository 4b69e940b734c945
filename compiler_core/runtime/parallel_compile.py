"""Compile many Triton launches at once, on a thread pool, before any of them runs.

A kernel compiles at its first launch, one after another: on the H200 a cold training step spent most
of its compile time there (gpt_block: 4.7 s of autotuning, ~4 s of first launches; each candidate config
of each kernel is a full TTIR -> LLVM -> PTX -> cubin pipeline of 50-300 ms). Triton 3.5+ can run
those pipelines in worker threads (`triton.AsyncCompileMode`: MLIR, LLVM and ptxas release the GIL):
inside the mode, `fn.warmup(...)` only submits a compile and returns; leaving the mode waits for all of
them and files each binary in the function's in-process cache under the same key the real launch
computes. So the later launches, the timing loop's and the host program's, find their binary ready.

The key (PITFALLS.md: a binary per specialization) holds each tensor's dtype and 16-byte alignment and
each integer's value class. Warm-up passes torch dtypes, which Triton wraps as tensors at address 0
(aligned), and the very integers the launch passes: the same key as a launch on fresh allocations. A
launch on a misaligned view simply compiles its own binary at launch, as it did before.

Nothing here changes what runs: a warm-up that fails (a config the compiler rejects) is forgotten, and
that launch compiles, or fails, in line exactly as without this module.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Optional

import torch

# FCOMPILE_COMPILE_THREADS=1 turns the pool off (every compile at its launch, in line).
DEFAULT_THREADS = 16


@dataclass(frozen=True)
class WarmLaunch:
    """One launch to compile ahead: the JIT function, its grid, its positional arguments as the launch
    passes them (tensors given by dtype) and its meta-parameters and compile options."""

    fn: Any
    grid: tuple
    args: tuple
    meta: tuple[tuple[str, Any], ...]


def compile_threads() -> int:
    try:
        requested = int(os.environ.get("FCOMPILE_COMPILE_THREADS", DEFAULT_THREADS))
    except ValueError:
        requested = DEFAULT_THREADS
    return max(1, min(requested, os.cpu_count() or 1))


def _async_mode() -> Optional[type]:
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # Triton before 3.5: launches compile in line
        return None
    return AsyncCompileMode


def compile_ahead(launches: list[WarmLaunch]) -> str:
    """Compiles the launches on a thread pool; returns one line for the tuning log ("" when nothing ran)."""
    distinct = list(dict.fromkeys(launches))
    mode_class = _async_mode()
    threads = compile_threads()
    if not distinct or mode_class is None or threads < 2 or not torch.cuda.is_available():
        return ""
    start = time.perf_counter()
    failed = 0
    with ThreadPoolExecutor(threads, thread_name_prefix="fcompile-triton") as pool:
        try:
            mode = mode_class(pool, ignore_errors=True)
        except TypeError:  # an AsyncCompileMode without ignore_errors: a failure stops the wait below
            mode = mode_class(pool)
        try:
            with mode:
                for launch in distinct:
                    try:
                        launch.fn.warmup(*launch.args, grid=launch.grid, **dict(launch.meta))
                    except Exception:  # noqa: BLE001 - rejected before compiling; the launch says why
                        failed += 1
        except Exception as exc:  # noqa: BLE001 - a failed compile: the rest compile at their launches
            return (f"compiled ahead on {threads} threads: stopped after {time.perf_counter() - start:.2f} s "
                    f"({type(exc).__name__}); the other launches compile in line")
    note = f", {failed} refused" if failed else ""
    return (f"compiled ahead: {len(distinct)} kernel binaries on {threads} threads in "
            f"{time.perf_counter() - start:.2f} s{note}")
