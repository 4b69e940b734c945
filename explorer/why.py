"""Why (not) fused: for two FX nodes of the primitive graph (the names the Fusion tab draws), say
whether they run in one kernel, and if not, why, from the scheduler's decision log.

    answer = why_fused(session, "sum_1", "sum_2")
    str(answer)  # "sum_1 is in kernel fused_sum_add_1, sum_2 in fused_exp_add_sum_0: refused because
                 #  reduction axis: ..."

Only reads the artifacts (`record.loops`, `record.schedule`): no recompile, so a widget can ask on
every change of a dropdown.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Optional

from compiler_core.schedule.artifacts import FusionDecision
from compiler_core.session import CompileSession, GraphRecord
from explorer.decisions import fx_names, in_fx_names


@dataclass(frozen=True)
class WhyFused:
    """The answer for one pair: which kernels compute each node, the verdict, and the sentence."""

    a: str
    b: str
    kernels_a: tuple[str, ...]  # kernels (or extern calls) computing a; () for an input or a view
    kernels_b: tuple[str, ...]
    verdict: str  # "same kernel" | "refused" | "not taken" | "never considered" | "not computed" | "other graph"
    reason: str  # the scheduler's reason (kind prefix first: "extern: ...", "reduction axis: ..."), or ours
    text: str

    def __str__(self) -> str:
        return self.text


class UnknownNode(KeyError):
    """A name that is no FX node of the compiled graphs; the message lists close matches."""

    def __str__(self) -> str:
        return self.args[0]


def computed_nodes(record: GraphRecord) -> tuple[str, ...]:
    """FX node names of the primitive graph that some loop node computes, in graph order."""
    if record.prims is None or record.loops is None:
        return ()
    origins = {o for n in record.loops.nodes for o in n.origins}
    return tuple(n.name for n in record.prims.graph_module.graph.nodes if n.name in origins)


def why_fused(session: CompileSession, a: str, b: str, graph: Optional[int] = None) -> WhyFused:
    """Whether FX nodes `a` and `b` (primitive-graph names, as the Fusion tab shows them) share a
    kernel, and why not. `graph`: index into `session.all_records()`; default: the first graph that
    has both names.

        why_fused(session, "exp", "add")   # "exp and add are both in kernel fused_exp_add_0."
    """
    records = session.all_records() if graph is None else [session.all_records()[graph]]
    records = [r for r in records if r.prims is not None and r.schedule is not None]  # fallbacks: no kernels
    names_of = [set(_fx_names(r)) for r in records]
    for name in (a, b):
        if not any(name in names for names in names_of):
            known = sorted(set().union(*names_of)) if names_of else []
            close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise UnknownNode(f"{name!r} is no FX node of the compiled graph{'s' if len(records) != 1 else ''}.{hint}"
                              f" The names are those of the primitive graph the Fusion tab draws"
                              f" ({len(known)} nodes).")
    for record, names in zip(records, names_of):
        if a in names and b in names:
            return _answer(record, a, b)
    where = {n: next(r for r, names in zip(records, names_of) if n in names) for n in (a, b)}
    return in_other_graphs(a, where[a], b, where[b])


def in_other_graphs(a: str, record_a: GraphRecord, b: str, record_b: GraphRecord) -> WhyFused:
    text = (f"{a} is in {_title(record_a)}, {b} in {_title(record_b)}: graphs are compiled separately (a graph "
            "break, or the forward/backward split), so they never share a kernel.")
    return WhyFused(a, b, (), (), "other graph", "separate graphs", text)


def _answer(record: GraphRecord, a: str, b: str) -> WhyFused:
    loops, schedule = record.loops, record.schedule
    nodes = {name: [n.name for n in loops.nodes if name in n.origins] for name in (a, b)}
    kernels = {name: tuple(dict.fromkeys(schedule.group_of(n).name for n in nodes[name])) for name in (a, b)}

    def result(verdict: str, reason: str, text: str) -> WhyFused:
        return WhyFused(a, b, kernels[a], kernels[b], verdict, reason, text)

    for name in (a, b):
        if not nodes[name]:
            what = "an input of the graph" if _op(record, name) == "placeholder" else "a view or constant"
            return result("not computed", f"{name} is {what}",
                          f"{name} is {what}: no kernel computes it, it is read where it is used.")
    shared = [k for k in kernels[a] if k in kernels[b]]
    if shared:
        return result("same kernel", "fused", f"{a} and {b} are both in {_kernels(record, shared[:1])}.")
    where = f"{a} is in {_kernels(record, kernels[a])}, {b} in {_kernels(record, kernels[b])}"
    decision = _last_decision(schedule.decisions, set(nodes[a]), set(nodes[b]))
    if decision is not None:
        reason = _in_fx_names(decision.reason, record)
        if not decision.legal:
            return result("refused", reason, f"{where}: refused because {reason}.")
        return result("not taken", reason,
                      f"{where}: legal ({reason}; would save {decision.bytes_saved:,} bytes) but not taken: "
                      "a pair that saves more bytes took one of the two groups first.")
    reason = _never_considered(record, set(nodes[a]), set(nodes[b]), a, b)
    return result("never considered", reason, f"{where}: never considered: {reason}.")


def _last_decision(decisions: tuple[FusionDecision, ...], a: set[str], b: set[str]) -> Optional[FusionDecision]:
    """The latest decision with a's loop nodes on one side and b's on the other (later rounds join
    larger groups, so the last one is the one that held)."""
    found = None
    for d in decisions:
        first, second = set(d.first), set(d.second)
        if (a & first and b & second) or (b & first and a & second):
            found = d
    return found


def _never_considered(record: GraphRecord, a: set[str], b: set[str], a_name: str, b_name: str) -> str:
    """The scheduler only pairs a producer with its reader, or siblings reading one buffer: say which
    path links the two instead."""
    loops = record.loops
    producer = loops.producers()
    by_name = {n.name: n for n in loops.nodes}
    for start, end, start_name, end_name in ((a, b, a_name, b_name), (b, a, b_name, a_name)):
        path = _path(by_name, producer, start, end)
        if path is not None:
            between = [by_name[n] for n in path]
            externs = [n for n in between if n.kind == "extern"]
            via = ", ".join(dict.fromkeys(o for n in (externs or between) for o in n.origins))
            if externs:
                return f"{end_name} reads {start_name} only through an extern call ({via})"
            return f"{end_name} reads {start_name} only through other nodes ({via}), fused elsewhere"
    return "neither reads the other's result and they share no input in one iteration space"


def _path(by_name: dict, producer: dict, start: set[str], end: set[str]) -> Optional[list[str]]:
    """Loop nodes strictly between `start` and `end` on one data path from start to end, or None."""
    for node in end:
        frontier = [(node, [])]
        seen = set()
        while frontier:
            name, between = frontier.pop()
            for buf in by_name[name].input_buffers:
                p = producer.get(buf)
                if p is None or p.name in seen:
                    continue
                seen.add(p.name)
                if p.name in start:
                    return list(reversed(between))
                frontier.append((p.name, between + [p.name]))
    return None


def _kernels(record: GraphRecord, names: tuple[str, ...]) -> str:
    kinds = {g.name: g.kind for g in record.schedule.groups}
    return " and ".join(f"the extern call {k}" if kinds[k] == "extern" else f"kernel {k}" for k in names)


def _in_fx_names(reason: str, record: GraphRecord) -> str:
    """The scheduler's reason names loop nodes (buf3); say the FX names the graph shows (sum_2)."""
    return in_fx_names(reason, fx_names(record.loops))


def _fx_names(record: GraphRecord) -> list[str]:
    return [n.name for n in record.prims.graph_module.graph.nodes if n.op != "output"]


def _op(record: GraphRecord, name: str) -> str:
    return next((n.op for n in record.prims.graph_module.graph.nodes if n.name == name), "")


def _title(record: GraphRecord) -> str:
    return f"graph {record.captured.index}" + (" (backward)" if record.part == "backward" else "")


@dataclass(frozen=True)
class Refusal:
    """Two FX nodes a refused fusion decision kept apart, in the kernels they ended in."""

    a: str
    b: str
    kernels_a: tuple[str, ...]
    kernels_b: tuple[str, ...]
    reason: str


def refusals(record: GraphRecord) -> list[Refusal]:
    """Per pair of FX nodes (a producer and its reader, or two siblings), the scheduler's last word on
    the pair when that word was a refusal, and the pair did not end in one kernel anyway."""
    loops, schedule = record.loops, record.schedule
    by_name = {n.name: n for n in loops.nodes}
    producer = loops.producers()
    kernel_of = schedule.kernel_of()
    last: dict[tuple[str, str], FusionDecision] = {}
    for d in schedule.decisions:
        # A loop node a rewrite removed before scheduling (a gather's producer, recomputed where it is
        # read: schedule/gather_inline.py) is named in its note but has no edges left.
        edges = [(p, r) for side, other in ((d.first, d.second), (d.second, d.first)) for r in other
                 if r in by_name
                 for buf in by_name[r].input_buffers if (p := getattr(producer.get(buf), "name", None)) in side]
        for p, r in edges or [(d.first[0], d.second[0])]:  # no edge: siblings reading one buffer
            last[(p, r)] = d
    # FX node -> the kernels computing it, in loop-node order: gathered once, not by a scan of every loop node
    # per refused pair (a 12-layer GPT-2's graphs: hundreds of pairs, thousands of loop nodes).
    computed_by: dict[str, dict[str, None]] = {}
    for m in loops.nodes:
        for origin in m.origins if m.name in kernel_of else ():
            computed_by.setdefault(origin, {})[kernel_of[m.name]] = None
    rows, seen, reasons = [], set(), {}
    for (p, r), d in last.items():
        if d.legal or kernel_of[p] == kernel_of[r]:
            continue
        for a in by_name[p].origins:
            for b in by_name[r].origins:
                if (a, b) not in seen:
                    seen.add((a, b))
                    if d.reason not in reasons:  # many pairs share a reason: each translated once
                        reasons[d.reason] = _in_fx_names(d.reason, record)
                    rows.append(Refusal(a, b, tuple(computed_by.get(a, ())), tuple(computed_by.get(b, ())),
                                        reasons[d.reason]))
    return rows
