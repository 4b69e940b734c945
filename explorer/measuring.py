"""Timing the explorer can stand behind: interleaved samples, spread, and a verdict on contention.

    timing = time_programs({"eager": lambda: fn(x), "ours": lambda: compiled(x)}, "cpu", repeats=10)
    timing.headline()    # "ours is 1.62× faster than eager" / "... 2.10× slower ..." / "noisy: rerun ..."
    timing.noisy         # True when the spread, the load or a quick re-measure says not to trust it

Every program is sampled round-robin after warm-up (a slow spell of a shared machine hits all alike),
each sample long enough that timer resolution does not dominate (compiler_core.bench.timing), with
CUDA events on the GPU. Round-robin alone does not make a 2-core machine fair (PITFALLS.md: eager's
OpenMP regions stall when another process holds a core, every sample alike), so the result also
carries the spread of each side, the load average against the cores, a short second measurement and,
on the CPU, eager re-timed with one thread; when any of them disagrees the view says "noisy: rerun"
instead of quoting a ratio.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from compiler_core.bench import noise
from compiler_core.bench.noise import load_average, usable_cores  # noqa: F401 - the explorer's names for them
from compiler_core.bench.timing import calls_per_sample, sample_ms, synchronize

# The quick re-measure's ratio may differ from the main one by this fraction before it counts as noise.
MAX_RECHECK_DISAGREEMENT = 0.25
RECHECK_REPEATS = 3
# Eager with several threads slower than with one by this factor: its threads are waiting for cores.
MAX_THREAD_SLOWDOWN = 1.5


@dataclass(frozen=True)
class Samples:
    """Seconds per call of one program, one value per sample (each a mean over `calls` calls)."""

    name: str
    seconds: tuple[float, ...]
    calls: int = 1  # calls per sample
    threads: Optional[int] = None  # intra-op threads this program runs with (None: not known)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def quartiles(self) -> tuple[float, float]:
        return noise.quartiles(self.seconds)

    @property
    def iqr(self) -> float:
        low, high = self.quartiles
        return high - low

    @property
    def relative_spread(self) -> float:
        """IQR / median: 0.05 means the middle half of the samples lies within 5% of the median."""
        return noise.relative_spread(self.seconds)


@dataclass(frozen=True)
class TimingResult:
    samples: dict[str, Samples]  # "eager", "ours", maybe "inductor" (or a comparison's name)
    device: str  # "cpu" or "cuda"
    timer: str  # "time.perf_counter" or "CUDA events"
    load: Optional[tuple[float, int]] = None  # (1-minute load average, usable cores) while measuring
    recheck: dict[str, float] = field(default_factory=dict)  # name -> median of the quick re-measure
    # CPU: eager's median with one intra-op thread; far below its multi-thread median, eager's parallel
    # regions were waiting for a core another process held (PITFALLS.md), however tight the samples.
    eager_one_thread_s: Optional[float] = None
    reasons: tuple[str, ...] = ()  # why the measurement is noisy ("" none)

    @property
    def noisy(self) -> bool:
        return bool(self.reasons)

    @property
    def repeats(self) -> int:
        return len(self.samples["eager"].seconds)

    def median(self, name: str) -> float:
        return self.samples[name].median

    @property
    def speedup(self) -> float:
        """eager median / ours median: above 1 ours is faster."""
        return ratio(self.median("eager"), self.median("ours"))

    def thread_note(self) -> str:
        """Says which thread settings each side ran with, and whether they differ."""
        known = {n: s.threads for n, s in self.samples.items() if s.threads is not None}
        if not known:
            return ""
        if len(set(known.values())) == 1:
            return f"every side ran with {next(iter(known.values()))} intra-op thread(s)"
        sides = ", ".join(f"{n} {t}" for n, t in known.items())
        return f"thread settings differ ({sides}): the comparison is not like for like"

    def short(self) -> str:
        """For a title line: '1.62× faster than eager', '2.10× slower than eager' or 'timing noisy: rerun'."""
        if self.noisy:
            return "timing noisy: rerun"
        return compare_words("ours", "eager", self.median("eager"), self.median("ours")).removeprefix("ours is ")

    def headline(self, other: str = "ours", base: str = "eager") -> str:
        """One sentence with the ratio in words, or "noisy: rerun" and why."""
        if self.noisy:
            return "noisy: rerun (" + "; ".join(self.reasons) + ")"
        return compare_words(other, base, self.median(base), self.median(other))


def ratio(base_s: float, other_s: float) -> float:
    return base_s / other_s if other_s > 0 else float("inf")


def compare_words(name: str, base: str, base_s: float, name_s: float) -> str:
    """'ours is 1.62× faster than eager', 'ours is 2.10× slower than eager', 'ours is as fast as eager'."""
    r = ratio(base_s, name_s)
    if 0.98 <= r <= 1.02:
        return f"{name} is as fast as {base} (within 2%)"
    if r > 1:
        return f"{name} is {r:.2f}× faster than {base}"
    return f"{name} is {1 / r:.2f}× slower than {base}"


def time_programs(programs: dict[str, Callable[[], object]], device: str, repeats: int,
                  threads: Optional[dict[str, Optional[int]]] = None, warmup: int = 2,
                  recheck: bool = True) -> TimingResult:
    """Time each program (a callable of no arguments) round-robin; programs must include "eager" and
    "ours". `threads` says which intra-op thread count each side runs with (the view reports it)."""
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    for _ in range(warmup):
        for fn in programs.values():
            fn()
    synchronize(device)
    calls = {name: calls_per_sample(fn, device) for name, fn in programs.items()}
    seconds = interleaved(programs, calls, device, repeats)
    load = load_average()
    again = interleaved(programs, calls, device, RECHECK_REPEATS) if recheck and repeats >= 3 else {}
    one_thread = None
    if recheck and device == "cpu" and torch.get_num_threads() > 1 and "eager" in programs:
        one_thread = one_thread_median(programs["eager"], calls["eager"])
    threads = threads or {}
    samples = {name: Samples(name, tuple(seconds[name]), calls[name], threads.get(name)) for name in programs}
    rechecked = {name: statistics.median(s) for name, s in again.items()}
    return TimingResult(samples=samples, device=device,
                        timer="CUDA events" if device == "cuda" else "time.perf_counter",
                        load=load, recheck=rechecked, eager_one_thread_s=one_thread,
                        reasons=noise_reasons(samples, load, rechecked, one_thread))


def one_thread_median(fn: Callable[[], object], calls: int) -> float:
    """Median seconds per call of `fn` with torch's intra-op threads set to one (restored after)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn()
        return statistics.median(sample_seconds(fn, calls, "cpu") for _ in range(RECHECK_REPEATS))
    finally:
        torch.set_num_threads(threads)


def interleaved(programs: dict[str, Callable[[], object]], calls: dict[str, int], device: str,
                repeats: int) -> dict[str, list[float]]:
    """`repeats` samples of each program, taken round-robin; each sample starts with one untimed call, so
    what the previous program left behind (spinning OpenMP threads, cold caches) is not charged here."""
    out: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(repeats):
        for name, fn in programs.items():
            fn()
            synchronize(device)
            out[name].append(sample_seconds(fn, calls[name], device))
    return out


def sample_seconds(fn: Callable[[], object], calls: int, device: str) -> float:
    """Mean seconds per call over `calls` back-to-back calls: the bench's loop (CUDA events on the GPU)."""
    return sample_ms(fn, calls, device) / 1e3


def noise_reasons(samples: dict[str, Samples], load: Optional[tuple[float, int]],
                  recheck: dict[str, float], eager_one_thread_s: Optional[float] = None) -> tuple[str, ...]:
    """Why a measurement cannot support a headline ratio; () when it can."""
    reasons = []
    if eager_one_thread_s is not None and "eager" in samples:
        eager = samples["eager"]
        # More threads may help little on a tiny op, but never make it this much slower on a quiet machine.
        if eager_one_thread_s * MAX_THREAD_SLOWDOWN < eager.median:
            reasons.append(f"eager took {eager.median * 1e3:.3g} ms with {eager.threads or 'several'} threads but "
                           f"{eager_one_thread_s * 1e3:.3g} ms with one: its parallel regions waited for a core "
                           "another process held")
    # Spread and load: the benchmark command's rules (compiler_core/bench/noise.py).
    reasons += noise.noise_reasons({s.name: s.seconds for s in samples.values()}, load)
    if {"eager", "ours"} <= set(recheck) and {"eager", "ours"} <= set(samples):
        first = ratio(samples["eager"].median, samples["ours"].median)
        second = ratio(recheck["eager"], recheck["ours"])
        if abs(second - first) > MAX_RECHECK_DISAGREEMENT * first:
            reasons.append(f"a quick re-measure gave {second:.2f}× against {first:.2f}×")
    return tuple(reasons)
