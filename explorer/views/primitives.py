"""Primitives view: what decomposition made of each graph. The operations Dynamo captured, the ATen
ops AOTAutograd traced them into with our decomposition table (softmax is already amax, sub, exp, sum
and div there), the primitive each ATen op is (as a chart), and the ops left to PyTorch as extern
calls, with why.

    model = primitives_model(record, "graph 0")
    model.captured      # (("softmax", 1), ("matmul", 1)): the captured graph's calls (forward graphs)
    model.aten          # (("aten.exp.default", 1, "exp"), ("aten.mm.default", 1, "extern"), ...)
    model.after         # (("exp", 1), ("sum", 1), ("extern", 1), ...): the primitive histogram
    model.externs       # (("mm", "aten.mm.default", "matmul runs in cuBLAS/oneDNN (extern call)"), ...)

Read from GraphRecord.captured, .aten_graph and .prims, for forward and backward graphs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional

import torch

from compiler_core.session import GraphRecord
from explorer.exploration import Exploration
from explorer.profiling import record_title
from explorer.render.html import esc, message, plural, table
from explorer.render.plot import figure_to_svg, new_figure, set_title

EXTERN_COLOUR, PRIMITIVE_COLOUR = "#d93025", "#1a73e8"
MAX_BARS = 30  # the most frequent primitives drawn; the table under the chart lists every one


@dataclass(frozen=True)
class PrimitivesModel:
    title: str
    captured: tuple[tuple[str, int], ...]  # (call, count) in the captured graph; () for a backward graph
    aten: tuple[tuple[str, int, str], ...]  # (ATen op, count, its primitive(s)), most frequent first
    after: tuple[tuple[str, int], ...]  # (primitive, count), most frequent first; "extern" counts calls
    externs: tuple[tuple[str, str, str], ...]  # (FX node, op, why it is an extern call)
    # Graphs with complex tensors: what became real ops, and the complex inputs/outputs the host
    # program reinterprets (compiler_core/decomp/complex_pairs.py); () and "" otherwise.
    complex_rewritten: tuple[str, ...] = ()
    complex_summary: str = ""


def _op_name(target: object) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}.{target._opname}.{target._overloadname}"
    return getattr(target, "__name__", str(target))


def _call_name(node: torch.fx.Node) -> str:
    if node.op == "call_module":
        return f"module {node.target}"
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return _op_name(node.target)


def primitives_model(record: GraphRecord, title: str = "") -> Optional[PrimitivesModel]:
    if record.prims is None or record.aten_graph is None:
        return None
    prims = record.prims
    captured: tuple[tuple[str, int], ...] = ()
    if record.part == "forward" and record.captured.graph_module is not None:
        calls = Counter(_call_name(n) for n in record.captured.graph_module.graph.nodes
                        if n.op in ("call_function", "call_method", "call_module"))
        captured = tuple(calls.most_common())
    kinds: dict[str, dict[str, None]] = {}  # ATen op -> its primitives, in order of appearance
    counts: Counter = Counter()
    for node in prims.graph_module.graph.nodes:
        if node.op == "call_function":
            op = _op_name(node.target)
            counts[op] += 1
            kinds.setdefault(op, {})[prims.node_prims.get(node.name, "?")] = None
    aten = tuple((op, n, ", ".join(kinds[op])) for op, n in counts.most_common())
    after_nodes = {n.name: n for n in prims.graph_module.graph.nodes}
    externs = tuple((name, _op_name(after_nodes[name].target) if name in after_nodes else "?", reason)
                    for name, reason in prims.externs.items())
    pairs = record.complex_pairs
    rewritten = pairs.rewritten if pairs is not None else ()
    summary = pairs.pretty().splitlines()[0] if pairs is not None else ""
    return PrimitivesModel(title, captured, aten, tuple(prims.histogram.items()), externs, rewritten, summary)


def render(exp: Exploration) -> str:
    parts = ["<p>Decomposition rewrites the ATen graph AOTAutograd hands over into a small set of "
             "<b>primitives</b> (pointwise math, reductions, views) that the loop IR lowers and fuses. "
             "What it cannot express stays an <b>extern call</b>: PyTorch runs it (matmuls in cuBLAS or "
             "oneDNN, attention in SDPA, random ops) and kernels fuse around it.</p>"]
    for record in exp.session.all_records():
        title = record_title(exp.session, record)
        parts.append(f"<h3>Primitives of {esc(title)}</h3>")
        model = primitives_model(record, title)
        if model is None:
            why = record.fallback_reason or "the compiler did not reach decomposition"
            parts.append(message(f"No primitive graph: {why}"))
            continue
        parts.append(section(model))
    return "".join(parts)


def section(model: PrimitivesModel) -> str:
    aten_total = sum(n for _, n, _ in model.aten)
    captured_total = sum(n for _, n in model.captured)
    start = (f"{plural(captured_total, 'captured call')} became " if model.captured
             else "AOTAutograd derived this backward graph: ")
    headline = (f"<p>{start}{plural(aten_total, 'ATen op')} of {plural(len(model.aten), 'kind')}, "
                f"{plural(len(model.externs), 'extern call')} among them.</p>")
    parts = [headline]
    if model.after:
        parts.append(histogram_plot(model))
    if model.captured:
        parts.append(table(["captured call (Dynamo)", "count"], model.captured, numeric=(1,)))
    parts.append(table(["ATen op (after decomposition)", "count", "primitive"], model.aten, numeric=(1,)))
    if model.complex_summary:
        parts.append(f"<p>Complex tensors: {esc(model.complex_summary)}. Our kernels compute with real and "
                     "imaginary parts; ops with no real rewrite are PyTorch's calls on the pairs.</p>")
        parts.append(table(["complex op (node: ATen op)"], [(r,) for r in model.complex_rewritten]))
    if model.externs:
        parts.append(table(["FX node", "op", "why PyTorch runs it"], model.externs))
    else:
        parts.append('<p class="fxe-note">No extern call: every op became primitives our kernels compute.</p>')
    return "".join(parts)


def histogram_plot(model: PrimitivesModel) -> str:
    bars = model.after[:MAX_BARS]
    fig = new_figure(6.0, 0.8 + 0.24 * len(bars))
    ax = fig.add_subplot()
    names = [name for name, _ in bars]
    ax.barh(range(len(bars)), [n for _, n in bars],
            color=[EXTERN_COLOUR if name == "extern" else PRIMITIVE_COLOUR for name in names])
    ax.set_yticks(range(len(bars)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("nodes after decomposition", fontsize=8)
    cut = f" (the {MAX_BARS} most frequent of {len(model.after)})" if len(bars) < len(model.after) else ""
    set_title(ax, f"{model.title}: primitive histogram{cut}; red: extern calls")
    return f'<div class="fxe-plot">{figure_to_svg(fig, alt="primitive histogram")}</div>'
