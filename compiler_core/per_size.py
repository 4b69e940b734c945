"""Graphs Dynamo captured with symbolic sizes, compiled by our pipeline once per concrete size.

Our kernels, memory plans and launch grids take fixed sizes. With `dynamic=True` (or a `mark_dynamic`
input) Dynamo hands us one graph whose sizes are symbols (s0, s1, ...) and guards that let it serve
every size; instead of running that graph in eager PyTorch, the graph is traced again with the sizes
of each call and compiled for them, the first time they come. Dynamo compiles once (its graph and
guards show the symbols); the cost is one compilation of ours per distinct size.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import torch

# Distinct sizes compiled for one symbolic graph; beyond this, new sizes run in eager PyTorch (said
# once in the session), like Dynamo's own recompile limit.
MAX_SIZES = 64

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def traced_inputs(gm: torch.fx.GraphModule, example_inputs: list) -> list:
    """The graph inputs as Dynamo traced them: fake tensors with symbolic sizes, SymInts. (The
    example inputs a backend is handed can be the real tensors of the first call.)"""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    traced = [n.meta.get("example_value", n.meta.get("val")) for n in placeholders]
    return [t if t is not None else e for t, e in zip(traced, example_inputs)]


def symbolic_positions(inputs: list) -> tuple[int, ...]:
    """Positions of the graph inputs (as traced) whose value or size is symbolic: what a size key reads."""
    return tuple(i for i, v in enumerate(inputs) if _is_symbolic(v))


def _is_symbolic(value: Any) -> bool:
    if isinstance(value, _SYMBOLIC):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride(), value.storage_offset()))
    return False


def size_key(args: tuple, positions: tuple[int, ...]) -> tuple:
    """What tells two calls of a symbolic graph apart: the sizes and strides of its symbolic tensors
    and the values of its symbolic scalars (Dynamo's guards already pin everything else)."""
    key = []
    for i in positions:
        v = args[i]
        key.append((tuple(v.shape), v.stride(), v.storage_offset()) if isinstance(v, torch.Tensor) else v)
    return tuple(key)


def bindings(traced: list, args: tuple, positions: tuple[int, ...]) -> dict[str, Any]:
    """Each plain size symbol (s0, s1, ...) of the graph's inputs with its value in this call."""
    def pairs() -> Iterator[tuple[Any, Any]]:
        for i in positions:
            example, value = traced[i], args[i]
            if isinstance(example, torch.Tensor) and isinstance(value, torch.Tensor):
                yield from zip((*example.shape, *example.stride()), (*value.shape, *value.stride()))
            else:
                yield example, value
    return _named(pairs())


def example_bindings(traced: list) -> dict[str, Any]:
    """Each plain size symbol of the graph's inputs with its value in the call Dynamo traced."""
    def pairs() -> Iterator[tuple[Any, Any]]:
        for value in traced:
            sizes = (value,) if isinstance(value, torch.SymInt) else \
                (*value.shape, *value.stride()) if isinstance(value, torch.Tensor) else ()
            yield from ((s, s.node.hint) for s in sizes if isinstance(s, torch.SymInt))
    return _named(pairs())


def _named(pairs: Iterable[tuple[Any, Any]]) -> dict[str, Any]:
    """symbol name -> value for the plain symbols among (symbolic, value) pairs, first value kept,
    in the order s0, s1, ..., s10 (shorter names first)."""
    bound: dict[str, Any] = {}
    for symbolic, concrete in pairs:
        name = str(symbolic)
        if isinstance(symbolic, _SYMBOLIC) and name.isidentifier() and concrete is not None:
            bound.setdefault(name, concrete)
    return dict(sorted(bound.items(), key=lambda kv: (len(kv[0]), kv[0])))


def scalar_positions(traced: list) -> frozenset[int]:
    """The graph inputs that are symbolic scalars (a size Dynamo passes as an int)."""
    return frozenset(i for i, v in enumerate(traced) if isinstance(v, _SYMBOLIC))


def without(args: tuple, positions: frozenset[int]) -> tuple:
    return tuple(a for i, a in enumerate(args) if i not in positions) if positions else args


def bind_scalars(gm: torch.fx.GraphModule, traced: list, args: tuple) -> torch.fx.GraphModule:
    """A copy of `gm` with its symbolic scalar inputs replaced by their values in this call (our
    stages take tensors); call it with `without(args, scalar_positions(traced))`."""
    scalars = scalar_positions(traced)
    if not scalars:
        return gm
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    for node in gm.graph.nodes:
        if placeholders.get(node) in scalars:
            env[node] = args[placeholders[node]]
        else:
            env[node] = graph.node_copy(node, lambda n: env[n])
    return torch.fx.GraphModule(gm, graph)


def describe(bound: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in bound.items())


class PerSizeGraph:
    """The callable our backend gives Dynamo for a symbolic graph: compiles (through `compile_for`,
    which runs our whole pipeline on concrete example inputs) for each new size key, then reuses."""

    def __init__(self, traced: list, compile_for: Callable[[tuple, dict[str, Any]], Callable],
                 eager: Callable, over_limit: Callable[[dict[str, Any]], None]):
        self.traced = traced
        self.positions = symbolic_positions(traced)
        self.compile_for, self.eager, self.over_limit = compile_for, eager, over_limit
        self.compiled: dict[tuple, Callable] = {}
        self.scalars = scalar_positions(traced)  # bound into each compiled graph: not passed to it

    def __call__(self, *args: Any) -> Any:
        key = size_key(args, self.positions)
        fn = self.compiled.get(key)
        if fn is None:
            bound = bindings(self.traced, args, self.positions)
            if len(self.compiled) >= MAX_SIZES:
                self.over_limit(bound)
                return self.eager(*args)
            fn = self.compiled[key] = self.compile_for(args, bound)
        return fn(*without(args, self.scalars))
