"""Wall-clock timing of a callable, eager against compiled.

    samples = measure(fn, (x,), repeats=20)          # seconds per call
    result = compare_eager(fn, compiled, (x,), repeats=20)
    result["speedup"]                                # eager median / ours median

CUDA tensors are timed with CUDA events (the host returns before the kernels finish); everything
else with `time.perf_counter`, with a device synchronize around each call either way.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

import torch


def measure(fn: Callable, args: Sequence[Any], repeats: int = 20, warmup: int = 3) -> list[float]:
    """Seconds per call of `fn(*args)`, one sample per repeat, after `warmup` untimed calls."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for _ in range(warmup):
        fn(*args)
    if _uses_cuda(args) and torch.cuda.is_available():
        return _measure_cuda(fn, args, repeats)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        samples.append(time.perf_counter() - start)
    return samples


def _measure_cuda(fn: Callable, args: Sequence[Any], repeats: int) -> list[float]:
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1000.0)  # elapsed_time is in milliseconds
    return samples


def _uses_cuda(args: Sequence[Any]) -> bool:
    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in _flatten(args))


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]


def compare_eager(fn: Callable, compiled: Callable, args: Sequence[Any], repeats: int = 20,
                  warmup: int = 3) -> dict:
    """Time eager `fn` and `compiled` on the same arguments.

    Returns {"eager_s": [...], "ours_s": [...], "eager_median_s", "ours_median_s", "speedup",
    "repeats"}; speedup > 1 means ours is faster.
    """
    # Eager first, then ours: the compiled function is already warm from its first (compiling) call.
    eager = measure(fn, args, repeats, warmup)
    ours = measure(compiled, args, repeats, warmup)
    eager_median, ours_median = statistics.median(eager), statistics.median(ours)
    return {
        "eager_s": eager,
        "ours_s": ours,
        "eager_median_s": eager_median,
        "ours_median_s": ours_median,
        "speedup": eager_median / ours_median if ours_median > 0 else float("inf"),
        "repeats": repeats,
    }
