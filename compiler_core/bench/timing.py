"""Timing loops owned by the bench: CUDA events on GPU, perf_counter on CPU; medians in milliseconds.

Triton's do_bench needs a GPU driver, and all three contenders must be timed by the same loop, so
the bench keeps its own. Samples of the contenders are interleaved, so a slow spell of a shared
machine hits all of them alike and the ratios stay fair.

    ms = time_interleaved({"eager": lambda: f(x), "ours": lambda: g(x)}, "cpu", repeats=15)
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

import torch

# One sample runs the callable often enough to last at least this long, so timer resolution and
# Python overhead between samples do not dominate launch-bound workloads.
MIN_SAMPLE_S = {"cpu": 5e-3, "cuda": 1e-3}


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def sample_ms(fn: Callable[[], object], calls: int, device: str) -> float:
    """Mean milliseconds per call over `calls` back-to-back calls."""
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) * 1e3 / calls


def calls_per_sample(fn: Callable[[], object], device: str) -> int:
    """How many calls make one sample last MIN_SAMPLE_S (after warm-up calls).

    The estimate is the fastest of a few single calls: one slow call (the machine busy elsewhere)
    must not turn every later sample into a single, noisy call.
    """
    for _ in range(3):
        fn()
    synchronize(device)
    estimate_ms = min(sample_ms(fn, 1, device) for _ in range(5))
    return max(1, math.ceil(MIN_SAMPLE_S[device] * 1e3 / max(estimate_ms, 1e-6)))


def time_interleaved(fns: dict[str, Callable[[], object]], device: str, repeats: int,
                     reduce: Callable[[list[float]], float] = statistics.median) -> dict[str, float]:
    """Median (or `reduce`) ms per call of each callable, `repeats` samples each, taken round-robin."""
    return {name: reduce(s) for name, s in sample_interleaved(fns, device, repeats).items()}


def sample_interleaved(fns: dict[str, Callable[[], object]], device: str, repeats: int) -> dict[str, list[float]]:
    """`repeats` samples (ms per call) of each callable, taken round-robin.

    Each sample starts with one untimed call, so what the previous contender left behind (OpenMP
    threads still spinning, cold caches) is not charged to this one.
    """
    calls = {name: calls_per_sample(fn, device) for name, fn in fns.items()}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            fn()
            synchronize(device)
            samples[name].append(sample_ms(fn, calls[name], device))
    return samples


def timed_call(fn: Callable[[], object], device: str) -> tuple[object, float]:
    """(result, wall seconds) of one call, synchronized: used for compile times (first calls)."""
    synchronize(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    return out, time.perf_counter() - t0


def copy_bandwidth_GBps(device: str, repeats: int = 20) -> float:
    """Measured copy bandwidth: bytes read + bytes written per second of one large tensor copy.

    256 MB on CUDA (well past L2), 64 MB on CPU (past the last-level cache of the test machines).
    The best sample, not the median: this is a ceiling, and a shared machine only ever lowers it.
    """
    nbytes = (256 if device == "cuda" else 64) * 2**20
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    ms = time_interleaved({"copy": lambda: dst.copy_(src)}, device, repeats, reduce=min)["copy"]
    return 2 * nbytes / (ms * 1e-3) / 1e9


def peak_cpu_bytes(fn: Callable[[], object]) -> int | None:
    """Bytes allocated above the starting level at the peak of one call on the CPU (outputs included),
    from PyTorch's CPU allocator as its profiler reports it (every allocation and free with its
    size); None where this torch's profiler does not give them. Frees of memory allocated before the
    call (a previous step's gradients) are not reported, so a call that drops them counts high;
    every contender runs the same step, so they are counted alike."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = fn()
        events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                        if e.name() == "[memory]")
    except Exception:  # noqa: BLE001 - a private structure of the profiler: no figure is the safe answer
        return None
    del out
    level = peak = 0
    for _, nbytes in events:
        level += nbytes
        peak = max(peak, level)
    return int(peak)


def peak_cuda_bytes(fn: Callable[[], object]) -> int:
    """Bytes allocated above the starting level at the peak of one call (outputs included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)
