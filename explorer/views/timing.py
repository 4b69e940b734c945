"""Timing view: eager against ours (and a comparison), sampled round-robin, with the spread and a verdict;
then where ours spends its time: host and launch overhead, our kernels, extern calls."""

from __future__ import annotations

from explorer.exploration import Exploration
from explorer.measuring import TimingResult, compare_words
from explorer.profiling import OursProfile
from explorer.render.html import Markup, esc, message, table
from explorer.render.plot import figure_to_svg, new_figure

COLORS = {"eager": "#9aa0a6", "ours": "#1a73e8"}
OTHER_COLOR = "#f29900"
PART_COLORS = {"host and launch overhead": "#fbbc04", "our kernels": "#1a73e8", "extern calls (PyTorch)": "#34a853"}


def render(exp: Exploration) -> str:
    parts = []
    timing = exp.timing
    if timing is None:
        parts.append('<p class="fxe-note">Not timed (repeats=0).</p>')
    else:
        parts.append(verdict_html(timing, exp.train))
        parts.append(timing_plot(timing))
        parts.append(samples_table(timing))
        if exp.measured is not None:
            parts.append("<h3>Where ours spends its time</h3>" + breakdown_html(exp.measured.ours, timing))
    compile_times = exp.session.timings
    if compile_times:
        rows = [(stage, f"{seconds * 1e3:.1f}") for stage, seconds in compile_times.items()]
        rows.append(("total", f"{sum(compile_times.values()) * 1e3:.1f}"))
        parts.append("<h3>Compile time per stage</h3>" + table(["stage", "ms"], rows, numeric=(1,)))
        ahead = compiled_ahead_lines(exp.session)
        if ahead:
            parts.append('<p class="fxe-note">On the GPU, "autotune" includes compiling every kernel: the '
                         "tuning candidates and the host program's launches are compiled at once, before "
                         "the first run, so no launch compiles in line.</p>"
                         + table(["graph", "compiled ahead"], ahead))
    return "".join(parts)


def compiled_ahead_lines(session) -> list[tuple[str, str]]:
    """(graph, line) for each "compiled ahead" line of the graphs' tuning logs (GPU compiles only)."""
    out = []
    for record in session.all_records():
        artifact = getattr(record, "artifact", None)
        for line in getattr(artifact, "tuning_log", ()) or ():
            if line.startswith(("compiled ahead", "compiling ahead")):
                out.append((f"{record.captured.index} ({record.part})", line))
    return out


def verdict_html(timing: TimingResult, train: bool = False) -> str:
    what = "one training step (forward + backward)" if train else "one call"
    how = (f"Time for {what}: {timing.repeats} samples of each program, taken round-robin after warm-up "
           f"(a sample is the mean of several calls, at least a few milliseconds), timed with {timing.timer}.")
    notes = [timing.thread_note()]
    if timing.load is not None:
        notes.append(f"load average {timing.load[0]:.1f} on {timing.load[1]} cores")
    notes = [n for n in notes if n]
    if timing.noisy:
        verdict = ('<p class="fxe-bad"><b>noisy: rerun</b>. This measurement cannot support a ratio: '
                   + esc("; ".join(timing.reasons)) + ". Close other work (or wait for it) and run again.</p>")
    else:
        word = "fxe-good" if timing.speedup >= 1 else "fxe-bad"
        verdict = f'<p class="{word}"><b>{esc(timing.headline())}</b> (medians).</p>'
    return f"<p>{esc(how)}</p>{verdict}" + (f'<p class="fxe-note">{esc("; ".join(notes))}.</p>' if notes else "")


def samples_table(timing: TimingResult) -> str:
    rows = []
    eager = timing.median("eager")
    for name, s in timing.samples.items():
        q1, q3 = s.quartiles
        against = "-" if name == "eager" else (
            "noisy: rerun" if timing.noisy else compare_words(name, "eager", eager, s.median))
        rows.append((name, f"{s.median * 1e3:.4g}", f"{q1 * 1e3:.4g} – {q3 * 1e3:.4g}", f"{s.relative_spread:.0%}",
                     f"{min(s.seconds) * 1e3:.4g}", f"{max(s.seconds) * 1e3:.4g}", s.calls,
                     "-" if s.threads is None else s.threads, against))
    return table(["program", "median ms", "middle half (IQR) ms", "IQR / median", "min ms", "max ms",
                  "calls per sample", "threads", "against eager"], rows, numeric=(1, 3, 4, 5, 6, 7))


def timing_plot(timing: TimingResult) -> str:
    """Horizontal bars at the medians, the middle half as a line, every sample as a dot, in ms."""
    fig = new_figure(6.0, 0.6 + 0.55 * len(timing.samples))
    ax = fig.add_subplot()
    names = list(timing.samples)
    for row, name in enumerate(names):
        s = timing.samples[name]
        samples_ms = [x * 1e3 for x in s.seconds]
        median = s.median * 1e3
        q1, q3 = (q * 1e3 for q in s.quartiles)
        ax.barh(row, median, color=COLORS.get(name, OTHER_COLOR), alpha=0.85, height=0.6)
        ax.plot([q1, q3], [row, row], color="black", linewidth=2.5, alpha=0.7)
        ax.plot(samples_ms, [row] * len(samples_ms), "o", color="black", markersize=2.5, alpha=0.5)
        ax.text(max(median, max(samples_ms)), row, f"  {median:.3g} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per call (lower is better); black line: middle half of the samples")
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlim(0, 1.3 * max(max(s.seconds) for s in timing.samples.values()) * 1e3)
    return f'<div class="fxe-plot">{figure_to_svg(fig)}</div>'


def breakdown_parts(profile: OursProfile) -> dict[str, float]:
    """Seconds of one compiled call by part: host overhead (the rest of the call), kernels, extern calls."""
    if profile.host_s is None or not profile.steps or not profile.total_s:
        return {}
    return {"host and launch overhead": profile.host_s, "our kernels": profile.kernel_s,
            "extern calls (PyTorch)": profile.extern_s}


def breakdown_html(profile: OursProfile, timing: TimingResult) -> str:
    parts = []
    if profile.note:
        parts.append(message(profile.note, "fxe-note"))
    split = breakdown_parts(profile)
    if not split:
        return "".join(parts)
    total = profile.total_s or 0.0
    parts.append("<p>Each kernel and extern call was timed on its own while the compiled program ran (a few "
                 f"more calls, {total * 1e3:.4g} ms each at the median); the host overhead is the rest of each "
                 "call (Dynamo's guards, the host program's Python, allocations, launches, and the timers' own "
                 "microseconds): the usual answer when a small program is slower than eager, which pays its "
                 "overhead per op instead.</p>")
    parts.append(breakdown_plot(split, timing.median("eager")))
    rows = [(name, f"{seconds * 1e3:.4g}", f"{seconds / total:.0%}" if total else "-")
            for name, seconds in split.items()]
    parts.append(table(["part of one call of ours", "ms", "share"], rows, numeric=(1, 2)))
    step_rows = [(s.graph, Markup(f"<code>{esc(s.name)}</code>"), _kind(s.kind), s.computes,
                  "-" if s.seconds is None else f"{s.seconds * 1e3:.4g}") for s in profile.steps]
    parts.append(table(["graph", "step", "kind", "computes", "median ms"], step_rows, numeric=(4,)))
    return "".join(parts)


def _kind(kind: str) -> str:
    return {"copy": "copy kernel (no arithmetic)", "extern": "extern call (PyTorch)"}.get(kind, kind)


def breakdown_plot(split: dict[str, float], eager_s: float) -> str:
    fig = new_figure(6.0, 2.1)
    ax = fig.add_subplot()
    left = 0.0
    for name, seconds in split.items():
        ax.barh(0, seconds * 1e3, left=left, color=PART_COLORS[name], height=0.6, label=name)
        left += seconds * 1e3
    ax.barh(1, eager_s * 1e3, color=COLORS["eager"], height=0.6, label="eager (whole call)")
    ax.set_yticks([0, 1], ["ours", "eager"])
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per call")
    fig.legend(fontsize=7, loc="outside lower center", ncols=2)
    ax.grid(axis="x", alpha=0.3)
    return f'<div class="fxe-plot">{figure_to_svg(fig)}</div>'
