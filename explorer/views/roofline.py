"""Roofline view: every kernel as a point, FLOPs per byte against FLOPs per second, under this device's
measured ceilings (copy bandwidth, matmul throughput); eager PyTorch's ops beside ours, so fusion shows
as points moving right (fewer bytes for the same arithmetic).

    model = roofline_model(exploration)
    model.points        # StepCost of ours and eager that can be placed (FLOPs, bytes and a time)
    model.left_out      # (name, why) for the others: copies, unmeasured steps, ops without FLOPs
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from explorer.ceilings import Ceilings
from explorer.exploration import Exploration
from explorer.profiling import StepCost
from explorer.render.html import Markup, esc, message, table
from explorer.render.plot import figure_to_svg, new_figure

SIDE_STYLE = {"ours": ("o", "#1a73e8"), "eager": ("^", "#9aa0a6")}


@dataclass(frozen=True)
class RooflineModel:
    points: tuple[StepCost, ...]  # placed: FLOPs > 0, bytes > 0, measured time
    left_out: tuple[tuple[StepCost, str], ...]  # not placed, and why
    ceilings: Optional[Ceilings]
    note: str = ""


def roofline_model(exp: Exploration) -> RooflineModel:
    measured = exp.measured
    if measured is None:
        return RooflineModel((), (), None, "not measured (repeats=0): nothing to place")
    points, left_out = [], []
    for step in (*measured.ours.steps, *measured.eager_ops):
        why = _why_not_placed(step)
        if why:
            left_out.append((step, why))
        else:
            points.append(step)
    return RooflineModel(tuple(points), tuple(left_out), measured.ceilings, measured.ours.note)


def _why_not_placed(step: StepCost) -> str:
    if step.kind == "copy":
        return "a copy (no arithmetic): a constant or a layout change"
    if step.seconds is None or step.seconds <= 0:
        return "not timed"
    if step.bytes <= 0:
        return "moves no bytes"
    if step.flops <= 0:
        return "no FLOPs counted for it"
    return ""


def render(exp: Exploration) -> str:
    model = roofline_model(exp)
    parts = []
    if model.note:
        parts.append(message(model.note, "fxe-note"))
    if exp.measured is None:
        return "".join(parts)
    c = model.ceilings
    if c is None:
        parts.append(message("The device's ceilings could not be measured: " + "; ".join(exp.measured.notes)))
    else:
        source = "kept from an earlier measurement" if c.from_disk else "measured now"
        parts.append(f"<p>Ceilings of this device ({esc(c.device_name)}, {c.threads} threads; {source}, "
                     f"{esc(c.measured_on)}): copy bandwidth <b>{c.copy_GBps:.1f} GB/s</b> (one large tensor "
                     f"copy, bytes read + written), matmul throughput <b>{c.matmul_GFLOPs:.1f} GFLOP/s</b> "
                     f"(fp32 mm, {c.matmul_n}×{c.matmul_n}). A kernel left of the ridge "
                     f"({c.ridge_intensity:.1f} FLOP/byte) is bound by memory: fusing moves it right.</p>")
    parts.append('<p class="fxe-note">Ours: FLOPs counted from the loop bodies, bytes from the schedule '
                 "(read from outside the kernel + written), time per kernel measured in the running program. "
                 "Eager: each ATen op from torch.profiler (time, inputs, bytes allocated); FLOPs from the "
                 "profiler (matmul, conv) or from our primitives for the same source op.</p>")
    if c is not None and not c.stable:
        parts.append('<p class="fxe-bad">The two rounds measuring the ceilings disagreed (the machine was busy): '
                     "they may be low, and were not kept for the next run.</p>")
    above = [p.name for p in model.points if c is not None and p.flops_per_s / 1e9 > 1.05 * c.attainable_GFLOPs(
        p.intensity)]
    if above:
        parts.append(f'<p class="fxe-bad">{len(above)} point(s) lie above the roof ({esc(", ".join(above[:4]))}): '
                     "a ceiling was measured low (a busy machine), or a count of FLOPs or bytes is off. Delete "
                     "the ceilings' file in the kernel cache (folder <code>ceilings</code>) to measure again.</p>")
    if model.points and c is not None:
        parts.append(roofline_plot(model))
    elif not model.points:
        parts.append('<p class="fxe-note">No kernel has both FLOPs and a measured time to place.</p>')
    parts.append(points_table(model))
    return "".join(parts)


def points_table(model: RooflineModel) -> str:
    rows = []
    for i, s in enumerate(model.points, 1):
        attainable = model.ceilings.attainable_GFLOPs(s.intensity) if model.ceilings else None
        achieved = s.flops_per_s / 1e9
        rows.append((i, s.side, Markup(f"<code>{esc(s.name)}</code>"), s.computes, f"{s.flops:,}", f"{s.bytes:,}",
                     f"{s.seconds * 1e6:.1f}", f"{s.intensity:.3g}", f"{achieved:.3g}", f"{s.bytes_per_s / 1e9:.3g}",
                     f"{achieved / attainable:.0%}" if attainable else "-", s.flops_source))
    for s, why in model.left_out:
        rows.append(("-", s.side, Markup(f"<code>{esc(s.name)}</code>"), s.computes, f"{s.flops:,}", f"{s.bytes:,}",
                     "-" if s.seconds is None else f"{s.seconds * 1e6:.1f}", "-", "-",
                     f"{s.bytes_per_s / 1e9:.3g}" if s.bytes_per_s else "-", "-", f"not drawn: {why}"))
    return table(["#", "side", "kernel / op", "computes", "FLOPs", "bytes", "µs", "FLOP/byte", "GFLOP/s", "GB/s",
                  "of the roof", "note"], rows, numeric=(0, 4, 5, 6, 7, 8, 9, 10))


def roofline_plot(model: RooflineModel) -> str:
    c = model.ceilings
    fig = new_figure(6.5, 4.2)
    ax = fig.add_subplot()
    intensities = [p.intensity for p in model.points]
    lo = min(min(intensities), c.ridge_intensity) / 4
    hi = max(max(intensities), c.ridge_intensity) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [c.attainable_GFLOPs(x) for x in xs], color="black", linewidth=1.2)
    ax.text(lo * 1.1, c.copy_GBps * lo * 1.3, f"copy {c.copy_GBps:.0f} GB/s", fontsize=8, rotation=0)
    ax.text(hi / 1.1, c.matmul_GFLOPs * 1.1, f"matmul {c.matmul_GFLOPs:.0f} GFLOP/s", fontsize=8, ha="right")
    for side in ("eager", "ours"):
        pts = [(i, p) for i, p in enumerate(model.points, 1) if p.side == side]
        if not pts:
            continue
        marker, color = SIDE_STYLE[side]
        ax.scatter([p.intensity for _, p in pts], [p.flops_per_s / 1e9 for _, p in pts], marker=marker,
                   color=color, s=36, label=side, zorder=3, edgecolors="black", linewidths=0.4)
        for i, p in pts:
            ax.annotate(str(i), (p.intensity, p.flops_per_s / 1e9), textcoords="offset points", xytext=(4, 3),
                        fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ys = [p.flops_per_s / 1e9 for p in model.points]
    ax.set_ylim(min(min(ys), c.copy_GBps * lo) / 3, c.matmul_GFLOPs * 3)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.grid(which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    return f'<div class="fxe-plot">{figure_to_svg(fig)}</div>'
