"""The fusion decision log as rows in FX names, filtered and sorted: the Fusion tab's decision table.

    rows = decision_rows(record)                       # every pair the scheduler considered, in its order
    pick(rows, "sum_1", verdict="refused", sort="bytes saved")   # what the widget's controls show

The static HTML lists every row in the scheduler's order (nothing can sort there without a script);
the widget filters and sorts the same rows, reading the artifacts only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compiler_core.schedule.artifacts import FusionDecision
from compiler_core.session import GraphRecord
from explorer.render.html import Markup, esc, table

VERDICTS = ("all", "fused", "refused", "legal, not taken")
SORTS = ("order considered", "bytes saved", "verdict", "reason")
HEADERS = ["#", "producer side", "consumer side", "verdict", "reason", "bytes saved"]


@dataclass(frozen=True)
class DecisionRow:
    number: int  # 1-based position in the scheduler's log: the order it considered the pairs
    producer: str  # the producer-side group's FX names, "a + b"
    consumer: str
    verdict: str  # one of VERDICTS[1:]
    reason: str  # the scheduler's reason with FX names in place of loop-node names
    bytes_saved: int
    loop_nodes: tuple[str, str]  # both sides in loop-node names (the log's own), for a tooltip

    def matches(self, query: str) -> bool:
        """Case-insensitive: `query` in either side (FX or loop-node names) or in the reason."""
        query = query.strip().lower()
        return not query or any(query in text.lower() for text in (self.producer, self.consumer, self.reason,
                                                                     *self.loop_nodes))


def verdict_of(decision: FusionDecision) -> str:
    return "fused" if decision.accepted else ("legal, not taken" if decision.legal else "refused")


def decision_rows(record: GraphRecord) -> tuple[DecisionRow, ...]:
    """Every fusion decision of a compiled graph, in FX names; () when it has no schedule."""
    if record.schedule is None or record.loops is None:
        return ()
    names = fx_names(record.loops)
    # A 12-layer GPT-2's 3,000-4,700 decisions per graph give about 400 distinct reasons: each translated once.
    reasons = {reason: in_fx_names(reason, names) for reason in {d.reason for d in record.schedule.decisions}}
    return tuple(DecisionRow(i, _side(d.first, names), _side(d.second, names), verdict_of(d), reasons[d.reason],
                             d.bytes_saved, (" + ".join(d.first), " + ".join(d.second)))
                 for i, d in enumerate(record.schedule.decisions, 1))


def pick(rows: tuple[DecisionRow, ...], query: str = "", verdict: str = "all",
         sort: str = "order considered") -> list[DecisionRow]:
    """The rows matching `query` with `verdict`, sorted by `sort` (bytes saved: most first; verdict:
    fused, refused, not taken; reason: alphabetical), ties in the scheduler's order."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict={verdict!r}: one of {', '.join(VERDICTS)}")
    if sort not in SORTS:
        raise ValueError(f"sort={sort!r}: one of {', '.join(SORTS)}")
    found = [r for r in rows if (verdict == "all" or r.verdict == verdict) and r.matches(query)]
    keys = {"order considered": lambda r: r.number,
            "bytes saved": lambda r: (-r.bytes_saved, r.number),
            "verdict": lambda r: (VERDICTS.index(r.verdict), r.number),
            "reason": lambda r: (r.reason.lower(), r.number)}
    return sorted(found, key=keys[sort])


def decision_table(rows: list[DecisionRow] | tuple[DecisionRow, ...]) -> str:
    """The decision table; each side's loop-node names as a tooltip."""
    verdicts = {"fused": Markup('<span class="fxe-good">fused</span>'),
                "refused": Markup('<span class="fxe-bad">refused</span>'), "legal, not taken": "legal, not taken"}
    body = [(r.number, Markup(f'<span title="{esc(r.loop_nodes[0])}">{esc(r.producer)}</span>'),
             Markup(f'<span title="{esc(r.loop_nodes[1])}">{esc(r.consumer)}</span>'), verdicts[r.verdict],
             r.reason, r.bytes_saved) for r in rows]
    return table(HEADERS, body, numeric=(0, 5))


def _side(nodes: tuple[str, ...], names: dict[str, str]) -> str:
    return " + ".join(dict.fromkeys(names.get(n, n) for n in nodes))


def fx_names(loops) -> dict[str, str]:
    """Loop node (and its buffer) name -> the FX names the graph shows for it; a node that is one of
    several computing the same FX node (var's mean and variance) gets its part number: `var (2/4)`.
    Asked once per fusion decision (hundreds in a large graph): made once per loop graph."""
    kept = _FX_NAMES.get(id(loops))
    if kept is not None and kept[0] is loops:
        return kept[1]
    names = _fx_names_of(loops)
    if len(_FX_NAMES) >= 32:
        _FX_NAMES.clear()
    _FX_NAMES[id(loops)] = (loops, names)
    return names


_FX_NAMES: dict[int, tuple] = {}  # id(loop graph) -> (the loop graph, its names): loop graphs are not hashable


def _fx_names_of(loops) -> dict[str, str]:
    by_origin: dict[tuple, list[str]] = {}
    for node in loops.nodes:
        by_origin.setdefault(node.origins, []).append(node.name)
    names = {}
    for origins, nodes in by_origin.items():
        label = ", ".join(origins) or "?"
        for i, node in enumerate(nodes, 1):
            names[node] = label if len(nodes) == 1 else f"{label} ({i}/{len(nodes)})"
    for node in loops.nodes:
        for extra in node.extra_outputs:
            names[extra.name] = names[node.name]
    return names


def in_fx_names(text: str, names: dict[str, str]) -> str:
    """`text` (a scheduler's reason, which names loop nodes: buf3) with the FX names the graph shows
    (sum_2) in their place; `names` from fx_names."""
    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: names.get(m.group(0), m.group(0)), text)
