"""Memory view: when each buffer is alive, in which storage, and what reuse saves.

    model = memory_model(record)          # one per compiled graph (forward, backward)
    model.rows                            # one StorageRow per physical allocation, its buffers in order
    model.peak_planned <= model.peak_unplanned

Rows are storages (x: the step of the host program, one per kernel or extern call). A storage the
memory planner hands on to a later buffer keeps its row, the buffers that take it turns drawn in
different colours. Read from the MemoryPlan (live ranges, reuse) and LoopGraph.storage_of().
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from compiler_core.session import GraphRecord
from explorer.exploration import Exploration
from explorer.profiling import record_title
from explorer.render.html import esc, message, table
from explorer.render.plot import figure_to_svg, new_figure, set_title

PALETTE = ("#1a73e8", "#f29900", "#34a853", "#d93025", "#9334e6", "#12b5cb", "#e52592", "#80868b")
MAX_ROWS = 60  # beyond this the picture shows the largest storages


@dataclass(frozen=True)
class Lifetime:
    buffer: str
    label: str  # the FX names that produce it
    first: int  # step that writes it
    last: int  # last step that reads it (or the last step, when held past the end)
    nbytes: int
    held_to_end: bool  # a graph output (or in an input's storage): lives past the program
    takes_storage_of: str = ""  # the dead buffer whose storage it reuses


@dataclass(frozen=True)
class StorageRow:
    storage: str  # the buffer that first allocated it (or the graph input it belongs to)
    nbytes: int
    lifetimes: tuple[Lifetime, ...]  # in order of first step
    where: str  # "allocated by the host program", "allocated by PyTorch (extern call)", "a graph input's storage"


@dataclass(frozen=True)
class MemoryModel:
    title: str
    steps: tuple[str, ...]  # kernel (or extern call) name per step
    rows: tuple[StorageRow, ...]
    peak_planned: int
    peak_unplanned: int


def memory_model(record: GraphRecord, title: str = "") -> Optional[MemoryModel]:
    if record.memory is None or record.loops is None or record.schedule is None:
        return None
    loops, plan = record.loops, record.memory
    storage_of = loops.storage_of()
    taken = {**dict(plan.reuse), **dict(plan.written_over)}  # new buffer -> dead buffer whose storage it takes
    producers = loops.producers()
    kinds = {b.name: b.kind for b in loops.inputs}
    kinds.update({b.name: b.kind for n in loops.nodes for b in (n.output, *n.extra_outputs)})
    pinned = {storage_of[b.name] for b in loops.inputs} | {storage_of[b] for b in loops.output_buffers()}
    end = len(record.schedule.groups) - 1

    def row_of(buffer: str) -> str:
        storage = storage_of.get(buffer, buffer)
        while storage in taken:
            storage = storage_of.get(taken[storage], taken[storage])
        return storage

    rows: dict[str, list[Lifetime]] = {}
    for r in plan.live_ranges:
        held = storage_of.get(r.buffer, r.buffer) in pinned
        origins = producers[r.buffer].origins if r.buffer in producers else ()
        rows.setdefault(row_of(r.buffer), []).append(Lifetime(
            r.buffer, ", ".join(origins) or r.buffer, r.first_step, end if held else r.last_step, r.nbytes, held,
            taken.get(r.buffer, "")))
    out = []
    for storage, lifetimes in rows.items():
        kind = kinds.get(storage, "kernel")
        where = {"input": "a graph input's storage", "constant": "a constant's storage",
                 "extern": "allocated by PyTorch (extern call)"}.get(kind, "allocated by the host program")
        lifetimes.sort(key=lambda t: (t.first, t.buffer))
        out.append(StorageRow(storage, max(t.nbytes for t in lifetimes), tuple(lifetimes), where))
    out.sort(key=lambda row: (row.lifetimes[0].first, row.storage))
    return MemoryModel(title, tuple(g.name for g in record.schedule.groups), tuple(out),
                       plan.peak_bytes_planned, plan.peak_bytes_unplanned)


def render(exp: Exploration) -> str:
    parts = []
    measured = exp.measured
    if measured is not None and measured.peak_bytes is not None:
        source = ("torch.cuda.max_memory_allocated" if measured.device == "cuda"
                  else "PyTorch's CPU allocator, every allocation and free as torch.profiler reports them")
        peak = f"measured peak of one call of the whole program: <b>{measured.peak_bytes:,} bytes</b> " \
               f"allocated above the level before the call, outputs included ({source})"
    elif measured is None:
        peak = "measured peak: not measured (repeats=0)"
    else:
        peak = "measured peak: not measured (this PyTorch's profiler reported no allocations)"
    parts.append(f"<p>Rows are storages, x is the step of the host program (one kernel or extern call each). "
                 f"A storage the planner hands on keeps its row; the buffers that take it in turn have different "
                 f"colours. Hatched: held past the end (a graph output). {peak}.</p>")
    models = [memory_model(r, record_title(exp.session, r)) for r in exp.session.all_records()]
    for record, model in zip(exp.session.all_records(), models):
        title = record_title(exp.session, record)
        parts.append(f"<h3>Memory of {esc(title)}</h3>")
        if model is None:
            why = record.fallback_reason or "the compiler did not reach memory planning"
            parts.append(message(f"No memory plan: {why}"))
            continue
        saved = model.peak_unplanned - model.peak_planned
        parts.append(table(["peak", "bytes"], [
            ("peak planned (with reuse)", f"{model.peak_planned:,}"),
            ("peak without reuse (every buffer its own storage, held to the end)", f"{model.peak_unplanned:,}"),
            ("saved by the plan", f"{saved:,}"),
        ], numeric=(1,)))
        if model.rows:
            parts.append(lifetime_plot(model))
            parts.append(rows_table(model))
        else:
            parts.append('<p class="fxe-note">No buffer is allocated: every step writes into inputs or views.</p>')
    return "".join(parts)


def rows_table(model: MemoryModel) -> str:
    rows = []
    for row in model.rows:
        for t in row.lifetimes:
            reuse = f"takes the storage of {t.takes_storage_of}" if t.takes_storage_of else ""
            held = "held past the end" if t.held_to_end else ""
            rows.append((row.storage, t.buffer, t.label, f"{t.nbytes:,}", f"{t.first} – {t.last}",
                         "; ".join(x for x in (row.where, reuse, held) if x)))
    return table(["storage", "buffer", "computes (FX)", "bytes", "live steps", "note"], rows, numeric=(3,))


def lifetime_plot(model: MemoryModel) -> str:
    rows = sorted(model.rows, key=lambda r: -r.nbytes)[:MAX_ROWS] if len(model.rows) > MAX_ROWS else model.rows
    steps = len(model.steps)
    fig = new_figure(6.8, 0.9 + 0.32 * len(rows))
    ax = fig.add_subplot()
    # One barh call per (colour, hatched) pair: a bar call per buffer made a training graph's plots slow.
    bars: dict[tuple[int, bool], list[tuple[int, Lifetime]]] = {}
    for y, row in enumerate(rows):
        for i, t in enumerate(row.lifetimes):
            bars.setdefault((i % len(PALETTE), t.held_to_end), []).append((y, t))
    for (i, held), found in bars.items():
        color = PALETTE[i]
        ax.barh([y for y, _ in found], [t.last - t.first + 0.8 for _, t in found],
                left=[t.first - 0.4 for _, t in found], height=0.6, color=color, alpha=0.8,
                hatch="//" if held else None, edgecolor="white" if held else color)
    for y, row in enumerate(rows):
        for i, t in enumerate(row.lifetimes):
            ax.text(t.first - 0.35, y, t.label[:28], va="center", fontsize=7, color="white" if i % 2 == 0 else "black",
                    clip_on=True)
    ax.set_yticks(range(len(rows)), [f"{r.storage} ({_size(r.nbytes)})" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(-0.6, steps - 0.4)
    if steps <= 12:
        ax.set_xticks(range(steps), [_short(n) for n in model.steps], rotation=25, ha="right", fontsize=7)
    else:
        ax.set_xlabel("step of the host program")
    ax.grid(axis="x", alpha=0.3)
    note = f" (the {MAX_ROWS} largest of {len(model.rows)} storages)" if len(rows) < len(model.rows) else ""
    set_title(ax, f"{model.title}: buffer lifetimes by storage{note}")
    return f'<div class="fxe-plot">{figure_to_svg(fig)}</div>'


def _short(name: str, width: int = 26) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _size(nbytes: int) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"
