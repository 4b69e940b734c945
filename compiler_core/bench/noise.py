"""Whether a timing can carry a ratio: the spread of each side's samples and the machine's load.

The benchmark command and the explorer's Timing view judge their samples by the same rules, so a
ratio one prints is one the other would print:

    reasons = noise_reasons({"eager": [...], "ours": [...]}, load=(1.7, 2))   # () when quotable

A side whose interquartile range is more than MAX_RELATIVE_SPREAD of its median, or a load average
above the core count while it was measured (another process wanted the cores: on a 2-core machine
eager's OpenMP regions then stall for milliseconds, PITFALLS.md), gives a reason; a ratio with a
reason is reported as "noisy: rerun", not as a figure.
"""

from __future__ import annotations

import os
import statistics
from typing import Optional

# A side whose interquartile range exceeds this fraction of its median is too noisy to quote.
MAX_RELATIVE_SPREAD = 0.25


def quartiles(samples: list[float] | tuple[float, ...]) -> tuple[float, float]:
    if len(samples) < 2:
        return samples[0], samples[0]
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[0], q[2]


def relative_spread(samples: list[float] | tuple[float, ...]) -> float:
    """IQR / median: 0.05 means the middle half of the samples lies within 5% of the median."""
    low, high = quartiles(samples)
    median = statistics.median(samples)
    return (high - low) / median if median > 0 else float("inf")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def load_average() -> Optional[tuple[float, int]]:
    """(1-minute load average, usable cores), or None where the OS does not say."""
    try:
        return os.getloadavg()[0], usable_cores()
    except (AttributeError, OSError):  # Windows
        return None


def noise_reasons(samples: dict[str, list[float] | tuple[float, ...]],
                  load: Optional[tuple[float, int]] = None) -> tuple[str, ...]:
    """Why these samples cannot support a ratio between them; () when they can."""
    reasons = [f"{name}'s samples spread {relative_spread(s):.0%} of its median (IQR)"
               for name, s in samples.items() if s and relative_spread(s) > MAX_RELATIVE_SPREAD]
    # The load average counts this process too: above the core count something else wanted the cores.
    if load is not None and load[0] > load[1]:
        reasons.append(f"load average {load[0]:.1f} above the {load[1]} cores")
    return tuple(reasons)
