"""Timing view: eager PyTorch against our compiled program (and a comparison, when asked), per repeat."""

from __future__ import annotations

import statistics

from explorer.exploration import Exploration
from explorer.render.html import table
from explorer.render.plot import figure_to_svg, new_figure

COLORS = {"eager": "#9aa0a6", "ours": "#1a73e8"}
OTHER_COLOR = "#f29900"


def render(exp: Exploration) -> str:
    parts = []
    timing = exp.timing
    if timing is None:
        parts.append('<p class="fxe-note">Not timed (repeats=0).</p>')
    else:
        series = timing_series(timing)
        what = "one training step (forward + backward)" if exp.train else "one call"
        parts.append(f"<p>Time for {what}, {timing['repeats']} repeats each after warm-up; bars are medians, "
                     f"dots single runs. Ours is <b>{timing['speedup']:.2f}×</b> eager.</p>")
        parts.append(timing_plot(series))
        rows = [(name, f"{statistics.median(s) * 1e3:.3f}", f"{min(s) * 1e3:.3f}", f"{max(s) * 1e3:.3f}",
                 f"{timing['eager_median_s'] / statistics.median(s):.2f}×") for name, s in series.items()]
        parts.append(table(["program", "median ms", "min ms", "max ms", "speedup over eager"], rows,
                           numeric=(1, 2, 3, 4)))
    compile_times = exp.session.timings
    if compile_times:
        rows = [(stage, f"{seconds * 1e3:.1f}") for stage, seconds in compile_times.items()]
        rows.append(("total", f"{sum(compile_times.values()) * 1e3:.1f}"))
        parts.append("<h3>Compile time per stage</h3>" + table(["stage", "ms"], rows, numeric=(1,)))
    return "".join(parts)


def timing_series(timing: dict) -> dict[str, list[float]]:
    series = {"eager": timing["eager_s"], "ours": timing["ours_s"]}
    if "compare_s" in timing:
        series[timing["compare_name"]] = timing["compare_s"]
    return series


def timing_plot(series: dict[str, list[float]]) -> str:
    """Horizontal bars at the medians with every sample as a dot, in milliseconds, as inline SVG."""
    fig = new_figure(6.0, 0.6 + 0.55 * len(series))
    ax = fig.add_subplot()
    names = list(series)
    for row, name in enumerate(names):
        samples_ms = [s * 1e3 for s in series[name]]
        color = COLORS.get(name, OTHER_COLOR)
        median = statistics.median(samples_ms)
        ax.barh(row, median, color=color, alpha=0.85, height=0.6)
        ax.text(max(median, max(samples_ms)), row, f"  {median:.3g} ms", va="center", fontsize=9)
        ax.plot(samples_ms, [row] * len(samples_ms), "o", color="black", markersize=2.5, alpha=0.6)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per call (lower is better)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(0, 1.25 * max(max(s) for s in series.values()) * 1e3)  # room for the labels
    return f'<div class="fxe-plot">{figure_to_svg(fig)}</div>'
