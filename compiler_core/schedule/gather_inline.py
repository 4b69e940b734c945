"""Gathers through pointwise producers: a gather reads its producer's inputs at the gathered positions.

A gather (cross entropy's pick of each row's target log-probability, `torch.gather`, `take`, an index
into a computed table) reads few elements of the tensor it indexes. When that tensor is pointwise,
e.g. log-softmax's `x - max - log(sum)` over rows x vocabulary, the scheduler cannot inline it into
the gather's kernel (a position loaded from memory cannot be mapped back to the producer's loop
variables), so the whole tensor was written for a read of one element per row. On GPT-2's LM head
(4,096 rows of 50,257) that is an 823 MB write and a second pass over the logits in the forward.

This pass rewrites the loop graph before scheduling: the gather computes the producer's value itself,
reading the producer's inputs at the gathered positions, and a producer no one else reads is gone:

    gather(x - m - l, t)        becomes        x[t] - m - l      (x[t]: an indirect load of x)

How a position becomes the producer's loop variable: an indirect read walks one dimension of the
producer's (dense) layout, the one with its stride and size; its affine part must not move along that
dimension. The producer's body is rewritten with that variable set to a symbol, and every load in
it whose index uses the symbol (linearly) becomes an indirect load with the same position, range
check and wrap; an index value that uses it (an `arange` compared with a bound, recomputed there
by index_inline.py) becomes the position itself in int64 arithmetic. A producer that uses the
position nonlinearly (inside a division or modulo) is left stored, as is one that would lose the
range check (no load of it depends on the position).

    graph, notes = inline_into_gathers(graph)   # notes: FusionDecisions for the decision log
"""

from __future__ import annotations

import dataclasses

import torch

from compiler_core.ir.graph import LoopGraph, LoopNode
from compiler_core.ir.index import Index, Var
from compiler_core.ir.symbolic import decide, thousands
from compiler_core.ir.values import (
    Cast,
    Constant,
    IndexValue,
    IndirectIndex,
    Load,
    Op,
    Value,
    rebuild,
    subs_index,
    walk,
    with_origins,
)
from compiler_core.schedule.artifacts import FusionDecision
from compiler_core.schedule.graph_rewrite import loop_ranges, without_dead
from compiler_core.schedule.kernel_plan import invert_layout

# Loads of the producer's body a gathered element may cost: beyond this, reading the stored tensor
# (one load) is cheaper than recomputing it at each gathered position.
MAX_PRODUCER_LOADS = 6
# Producers followed back from one gather. A bilinear upsample and a log-softmax put ~10 pointwise
# steps between cross entropy's pick at the labels and the logits: stopping sooner leaves the pick
# reading a stored upsample, which then cannot fuse with the loss (and is written only for it).
MAX_DEPTH = 16
_SYMBOL = "gather_position{}"  # not a loop variable of any node (x*, r*)


def inline_into_gathers(graph: LoopGraph) -> tuple[LoopGraph, tuple[FusionDecision, ...]]:
    producers = {n.output.name: n for n in graph.nodes if n.kind == "pointwise" and not n.extra_outputs}
    if not producers or not any(ld.indirect and ld.buffer in producers for n in graph.nodes if n.body is not None
                                for ld in walk(n.body) if isinstance(ld, Load)):
        return graph, ()
    nodes = list(graph.nodes)
    inlined: dict[str, list[str]] = {}  # producer -> readers that now compute it themselves
    for i, node in enumerate(nodes):
        if node.kind == "extern" or node.body is None:
            continue
        body = _inline(node.body, producers, loop_ranges(node),
                       inlined, node.name)
        if body is not node.body:
            nodes[i] = dataclasses.replace(node, body=body)
    if not inlined:
        return graph, ()
    nodes, removed = without_dead(nodes, set(inlined), graph.output_buffers())
    notes = tuple(_note(producers[p], readers, p in removed) for p, readers in inlined.items())
    return dataclasses.replace(graph, nodes=tuple(nodes)), notes


def _inline(body: Value, producers: dict[str, LoopNode], ranges: dict[str, int],
            inlined: dict[str, list[str]], reader: str, depth: int = 0) -> Value:
    """`body` with each indirect load of a pointwise producer replaced by the producer's value there
    (recursively: the producer's own inputs may be pointwise too)."""
    if depth > MAX_DEPTH:
        return body

    def leaf(v: Value) -> Value:
        if not (isinstance(v, Load) and v.indirect and v.buffer in producers):
            return v
        value = at_positions(producers[v.buffer], v, ranges)
        if value is None:
            return v
        readers = inlined.setdefault(v.buffer, [])
        if reader not in readers:
            readers.append(reader)
        return _inline(value, producers, ranges, inlined, reader, depth + 1)

    return rebuild(body, leaf)


def at_positions(producer: LoopNode, load: Load, ranges: dict[str, int]) -> Value | None:
    """The producer's value at the element `load` reads (`ranges`: the reader's loop variables), or
    None where it cannot be computed there."""
    if load.mask is not None:
        return None  # a masked gather (cat of gathers) reads nothing where the mask is off: keep it stored
    loads_in_body = [v for v in walk(producer.body) if isinstance(v, Load)]
    if len(loads_in_body) > MAX_PRODUCER_LOADS:
        return None
    layout = producer.output.layout
    symbols: dict[str, IndirectIndex] = {}
    dims_walked: dict[int, str] = {}
    for j, position in enumerate(load.indirect):
        dims = [d for d, (size, stride) in enumerate(zip(layout.size, layout.stride))
                if decide(size > 1) and stride == position.stride]
        if len(dims) != 1 or layout.size[dims[0]] != position.size or dims[0] in dims_walked:
            return None
        dims_walked[dims[0]] = name = _SYMBOL.format(j)
        symbols[name] = position
    mapping = invert_layout(producer, load.index, ranges)
    for d, name in dims_walked.items():
        if mapping[f"x{d}"].simplify(ranges) != Index.of(0):
            return None  # the affine part moves along the walked dimension too
        mapping[f"x{d}"] = Index.var(name)
    with_symbols = {**ranges, **{name: p.size for name, p in symbols.items()}}
    body = subs_index(with_origins(producer.body, producer.origins), mapping, with_symbols)
    return _positions_as_indirect(body, symbols)


def _positions_as_indirect(body: Value, symbols: dict[str, IndirectIndex]) -> Value | None:
    """Loads whose index holds a position symbol (c * symbol + rest) become indirect loads of `rest`
    with that position at stride c; None if a symbol is used any other way, or not at all."""
    used: set[str] = set()
    for v in walk(body):
        if isinstance(v, (Load, IndexValue)):
            for atom, _ in v.index.terms:
                if not isinstance(atom, Var) and atom.arg.free_vars() & symbols.keys():
                    return None  # a position inside a division or modulo: not a single stride

    def leaf(v: Value) -> Value:
        if isinstance(v, IndexValue):
            return _index_value_at(v, symbols)
        if not isinstance(v, Load):
            return v
        terms = {atom.name: coef for atom, coef in v.index.terms if isinstance(atom, Var) and atom.name in symbols}
        if not terms:
            return v
        used.update(terms)
        rest = Index(tuple(t for t in v.index.terms if not (isinstance(t[0], Var) and t[0].name in symbols)),
                     v.index.const)
        positions = tuple(dataclasses.replace(symbols[name], stride=coef) for name, coef in terms.items())
        return dataclasses.replace(v, index=rest, indirect=v.indirect + positions)

    out = rebuild(body, leaf)
    # Every position must still be read somewhere: that read checks its range (eager's error).
    return out if used == set(symbols) else None


def _index_value_at(v: IndexValue, symbols: dict[str, IndirectIndex]) -> Value:
    """An index value (an `arange` compared with a bound: a causal mask, a column test) at the
    gathered positions: each position symbol's term becomes the position itself, wrapped as the
    read wraps it, times its coefficient."""
    terms = [(atom.name, coef) for atom, coef in v.index.terms if isinstance(atom, Var) and atom.name in symbols]
    if not terms:
        return v
    rest = Index(tuple(t for t in v.index.terms if not (isinstance(t[0], Var) and t[0].name in symbols)),
                 v.index.const)
    value: Value = IndexValue(rest, torch.int64)
    for name, coef in terms:
        position = symbols[name]
        p = position.value if position.value.dtype == torch.int64 else Cast(position.value, torch.int64)
        if position.wrap:  # a negative position counts from the end: the value is the wrapped one
            size = Constant(position.size, torch.int64)
            negative = Op("lt", (p, Constant(0, torch.int64)), torch.bool)
            p = Op("where", (negative, Op("add", (p, size), torch.int64), p), torch.int64)
        term = p if coef == 1 else Op("mul", (p, Constant(coef, torch.int64)), torch.int64)
        value = Op("add", (value, term), torch.int64)
    return value if v.dtype == torch.int64 else Cast(value, v.dtype)


def _note(producer: LoopNode, readers: list[str], removed: bool) -> FusionDecision:
    where = ", ".join(readers)
    # The producer's own FX names: once it is gone from the loop graph, nothing else maps it to them.
    what = f"{producer.name} ({', '.join(producer.origins)})" if producer.origins else producer.name
    if removed:
        reason = (f"gather: {where} reads the inputs of {what} at the gathered positions, so "
                  f"{producer.name} ({thousands(producer.output.nbytes)} bytes) is never stored")
    else:
        reason = (f"gather: {where} reads the inputs of {what} at the gathered positions; "
                  f"{producer.name} is still stored for its other readers")
    saved = producer.output.nbytes if removed else 0
    return FusionDecision((producer.name,), tuple(readers), True, True, reason, saved)
