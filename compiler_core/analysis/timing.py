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
    cuda = _uses_cuda(args)
    return [_time_one_call(fn, args, cuda) for _ in range(repeats)]


def compare_eager(fn: Callable, compiled: Callable, args: Sequence[Any], repeats: int = 20,
                  warmup: int = 3) -> dict:
    """Time eager `fn` and `compiled` on the same arguments.

    Returns {"eager_s": [...], "ours_s": [...], "eager_median_s", "ours_median_s", "speedup",
    "repeats"}; speedup > 1 means ours is faster.
    """
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for _ in range(warmup):
        fn(*args)
        compiled(*args)
    cuda = _uses_cuda(args)
    eager, ours = [], []
    # Alternate the two, so that whatever else the machine is doing slows both alike.
    for _ in range(repeats):
        eager.append(_time_one_call(fn, args, cuda))
        ours.append(_time_one_call(compiled, args, cuda))
    eager_median, ours_median = statistics.median(eager), statistics.median(ours)
    return {
        "eager_s": eager,
        "ours_s": ours,
        "eager_median_s": eager_median,
        "ours_median_s": ours_median,
        "speedup": eager_median / ours_median if ours_median > 0 else float("inf"),
        "repeats": repeats,
    }


def _time_one_call(fn: Callable, args: Sequence[Any], cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0  # elapsed_time is in milliseconds
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _uses_cuda(args: Sequence[Any]) -> bool:
    if not torch.cuda.is_available():
        return False
    return any(isinstance(a, torch.Tensor) and a.is_cuda for a in _flatten(args))


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]
