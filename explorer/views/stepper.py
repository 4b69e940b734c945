"""Stepper view: the pipeline one stage at a time on the user's program, each stage's artifact printed
with a line saying what changed, counted from the artifacts themselves.

    for step in pipeline_steps(session): print(step.number, step.stage, step.changed)
    # 1 captured graph   TorchDynamo captured 7 ops from your program (2 inputs)
    # ...
    # 5 schedule         7 loop nodes in 3 kernels and 1 extern call; 3 fusions taken, 8 refused

The widget (explorer/view.py) shows one step with Back/Next; the static HTML shows every step as a
<details>, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from compiler_core.session import CompileSession, GraphRecord
from explorer.exploration import Exploration
from explorer.printed import printed
from explorer.render.code import highlight_code
from explorer.render.html import details, esc, plural

STAGES = ("captured graph", "ATen graph", "primitives", "loop IR", "schedule (kernels)", "memory plan",
          "kernel sources", "host program")


@dataclass(frozen=True)
class Step:
    number: int  # 1-based, over every graph of the session
    graph: str  # "graph 0", "graph 0 (backward)"
    stage: str  # one of STAGES
    changed: str  # one line: what this stage made of the previous one
    text: str  # the artifact's pretty()
    language: str = "python"  # for highlighting `text`: "python", "cpp" or "text"

    @property
    def title(self) -> str:
        return f"{self.graph}: {self.stage}"


def pipeline_steps(session: CompileSession) -> list[Step]:
    """Every stage each graph reached, in pipeline order (a backward graph starts at its ATen graph).
    Printing a GPT-2's artifacts takes a good part of a second, and the static tab and the widget both
    ask: made once per session and records."""
    records = tuple(session.all_records())
    kept = _STEPS.get(id(session))
    if kept is not None and len(kept[0]) == len(records) and all(a is b for a, b in zip(kept[0], records)):
        return list(kept[1])
    steps = _pipeline_steps(records)
    if len(_STEPS) >= 8:
        _STEPS.clear()
    _STEPS[id(session)] = (records, tuple(steps))
    return steps


_STEPS: dict[int, tuple[tuple[GraphRecord, ...], tuple[Step, ...]]] = {}  # id(session) -> (its records, their steps)


def _pipeline_steps(records: tuple[GraphRecord, ...]) -> list[Step]:
    found: list[tuple[str, str, str, str]] = []
    for record in records:
        graph = f"graph {record.captured.index}" + (" (backward)" if record.part == "backward" else "")
        found += [(graph, *step) for step in _record_steps(record)]
    return [Step(i, graph, stage, changed, text, language)
            for i, (graph, stage, changed, text, language) in enumerate(found, 1)]


def _record_steps(record: GraphRecord) -> list[tuple[str, str, str, str]]:
    steps = []
    captured = record.captured
    ops = captured.op_count
    if record.part != "backward":
        steps.append((STAGES[0], f"TorchDynamo captured {plural(ops, 'op')} from your program "
                                 f"({plural(len(captured.inputs), 'input')})", captured.pretty(), "python"))
    aten = _op_count(record.aten_graph) if record.aten_graph is not None else None
    if record.joint is not None:
        joint = record.joint
        saved = (f"; the partition saves {plural(len(record.partition.saved), 'tensor')} "
                 f"({_mb(record.partition.saved_bytes)}) for the backward" if record.partition is not None else "")
        text = printed(joint) + ("\n\n" + record.partition.pretty() if record.partition is not None else "")
        steps.append((STAGES[1], f"{plural(ops, 'captured op')} became a joint graph of {len(joint.forward_nodes)} "
                                 f"forward and {len(joint.backward_nodes)} backward nodes{saved}", text, "python"))
    elif aten is not None:
        before = f"{plural(ops, 'captured op')} became" if record.part != "backward" else "the backward is"
        steps.append((STAGES[1], f"{before} {plural(aten, 'ATen op')} (AOTAutograd)",
                      record.aten_graph.print_readable(print_output=False).rstrip(), "python"))
    prims = record.prims
    if prims is not None:
        count, externs = len(prims.node_prims), len(prims.externs)
        source = f"{plural(aten, 'ATen op')} became" if aten is not None else "decomposed into"
        steps.append((STAGES[2], f"{source} {plural(count, 'primitive op')}; {plural(externs, 'extern call')}",
                      printed(prims), "python"))
    loops = record.loops
    if loops is not None:
        externs = sum(1 for n in loops.nodes if n.kind == "extern")
        source = f"{plural(len(prims.node_prims), 'primitive op')} became" if prims is not None else "lowered to"
        steps.append((STAGES[3], f"{source} {plural(len(loops.nodes), 'loop node')} "
                                 f"({plural(externs, 'extern call')} among them)", printed(loops), "text"))
    schedule = record.schedule
    if schedule is not None and loops is not None:
        externs = len(schedule.groups) - schedule.kernel_count
        taken = sum(1 for d in schedule.decisions if d.accepted)
        refused = sum(1 for d in schedule.decisions if not d.legal)
        steps.append((STAGES[4], f"{plural(len(loops.nodes), 'loop node')} in {plural(schedule.kernel_count, 'kernel')}"
                                 f" and {plural(externs, 'extern call')}; {plural(taken, 'fusion')} taken, "
                                 f"{refused} refused", schedule.pretty(), "text"))
    memory = record.memory
    if memory is not None:
        steps.append((STAGES[5], f"peak {_mb(memory.peak_bytes_planned)} planned vs "
                                 f"{_mb(memory.peak_bytes_unplanned)} without reuse; "
                                 f"{plural(len(memory.reuse), 'buffer')} reuse a dead buffer's storage",
                      memory.pretty(), "text"))
    if record.kernels:
        backend = record.kernels[0].backend
        lines = sum(len(k.source.splitlines()) for k in record.kernels)
        steps.append((STAGES[6], f"{plural(len(record.kernels), 'kernel')} generated for {backend}: "
                                 f"{plural(lines, 'line')} of source",
                      "\n\n".join(k.pretty() for k in record.kernels), "cpp" if backend == "cpp" else "python"))
    if record.wrapper is not None:
        lines = len(record.wrapper.source.splitlines())
        steps.append((STAGES[7], f"a host program of {plural(lines, 'line')} allocates the buffers, launches the "
                                 "kernels and extern calls in order, frees and returns", record.wrapper.pretty(),
                      "python"))
    if record.fallback_reason:
        steps.append(("fell back to eager", f"the compiler stopped here: {record.fallback_reason.splitlines()[0]}",
                      record.error_traceback or record.fallback_reason, "text"))
    return steps


def step_html(step: Step, total: int) -> str:
    """One step: its counter and what changed, then the artifact."""
    head = (f'<p class="fxe-head">Step {step.number} of {total}: {esc(step.title)}</p>'
            f"<p>{esc(step.changed)}</p>")
    return head + highlight_code(step.text, step.language)


def render(exp: Exploration) -> str:
    steps = pipeline_steps(exp.session)
    if not steps:
        return '<p class="fxe-note">Nothing was captured: no stage to step through.</p>'
    intro = ('<p class="fxe-note">The pipeline one stage at a time: each stage\'s artifact as it prints, '
             "and what that stage made of the one before.</p>")
    return intro + "".join(details(f"{s.number}. {s.title}: {s.changed}", highlight_code(s.text, s.language))
                           for s in steps)


def _op_count(graph_module: torch.fx.GraphModule) -> int:
    return sum(1 for n in graph_module.graph.nodes if n.op == "call_function")


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 10_000 else f"{nbytes:,} bytes"
