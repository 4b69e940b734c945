"""Symbolic sizes: sizes that stay sympy expressions over Dynamo's symbols (s0, s1, ...) through
lowering, scheduling and code generation, so that one compilation serves every size.

A size in the IR is a Python int or, where Dynamo traced it as a symbol, a `sympy.Expr` such as
`768*s0`. Dynamo makes its size symbols positive integers, so sympy decides by itself every question
that holds for all such values (`768*s0 > 0`, `(768*s0) % 16 == 0`); a question it cannot decide
(`s0 <= 1024`) raises TypeError when the compiler asks it as a plain `if`. That makes an unprepared
use of a symbolic size fail loudly (the graph is then compiled per concrete size, per_size.py) instead
of silently answering for the example size only.

Where a decision that changes the code must be taken on the example sizes (whether indices fit in
32 bits), `decide` asks Dynamo's ShapeEnv: it answers for the example sizes and records the answer as
a guard, which Dynamo checks before it reuses the compiled graph (a call whose sizes answer
differently is compiled again). `known` asks the ShapeEnv's range analysis, without a guard, whether
a condition holds for every size (simplifications that may be skipped). `hint` gives the example
value where the answer only affects speed (block sizes, parallelism) or a figure shown.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator, Optional, Union

import sympy
import torch

Size = Union[int, sympy.Expr]

# False: every graph with symbolic sizes is compiled per concrete size (per_size.py), as before
# symbolic kernels; tests of that path turn it off.
ENABLED = True

_SHAPE_ENV: contextvars.ContextVar[Optional[Any]] = contextvars.ContextVar("fcompile_shape_env", default=None)


class NotSymbolic(Exception):
    """This graph's kernels cannot take its sizes as symbols (yet): compile it per concrete size."""


def as_size(value: Any) -> Size:
    """An int, or the sympy expression of a SymInt (an int when the expression is a number)."""
    if type(value) is int:  # the common case, first: Index arithmetic calls this for every constant
        return value
    if isinstance(value, torch.SymInt):
        expr = value.node.expr
        return int(expr) if expr.is_number else expr
    if isinstance(value, sympy.Expr):
        return int(value) if value.is_number else value
    return int(value)


def is_symbolic(value: Any) -> bool:
    return isinstance(value, sympy.Basic) and not value.is_number






@contextlib.contextmanager
def shape_env_of(gm: torch.fx.GraphModule) -> Iterator[Optional[Any]]:
    """The ShapeEnv of a graph traced with symbolic sizes, current while it compiles (None: static)."""
    env = None
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for v in (val if isinstance(val, (list, tuple)) else (val,)):
            sizes = (v,) if isinstance(v, torch.SymInt) else \
                tuple(v.shape) if isinstance(v, torch.Tensor) else ()
            env = next((s.node.shape_env for s in sizes if isinstance(s, torch.SymInt)), None)
            if env is not None:
                break
        if env is not None:
            break
    token = _SHAPE_ENV.set(env)
    try:
        yield env
    finally:
        _SHAPE_ENV.reset(token)


def _env() -> Any:
    env = _SHAPE_ENV.get()
    if env is None:
        raise NotSymbolic("a symbolic size outside a symbolic compilation")
    return env


def hint(value: Size, values: Optional[dict[str, int]] = None) -> int:
    """The value a size has in the example call: for decisions that only affect speed. After the
    compilation, pass `values` (LoopGraph.size_hints): the ShapeEnv is then gone."""
    if type(value) is int:
        return value
    if not is_symbolic(value):
        return int(value)
    if values is not None:
        return int(value.xreplace({s: values[s.name] for s in value.free_symbols}))
    env = _env()
    values = getattr(env, "backed_var_to_val", None)  # torch 2.13's name; var_to_val in 2.11
    return int(value.xreplace(values if values is not None else env.var_to_val))


def example_values() -> dict[str, int]:
    """Each size symbol's value in the example call, by name (for timing kernels at those sizes)."""
    env = _SHAPE_ENV.get()
    if env is None:
        return {}
    values = getattr(env, "backed_var_to_val", None)
    return {str(k): int(v) for k, v in (values if values is not None else env.var_to_val).items()}


def decide(condition: Any) -> bool:
    """The truth of a condition over sizes: sympy's where it holds for every size, else the example
    call's, kept as a guard Dynamo checks before it reuses this compilation."""
    if isinstance(condition, bool):
        return condition
    if isinstance(condition, sympy.logic.boolalg.BooleanAtom):
        return bool(condition)
    return bool(_env().evaluate_expr(condition))


def known(condition: Any) -> bool:
    """Whether a condition over sizes holds for every size Dynamo allows (its sizes are >= 2): no
    guard, and False where it depends on the sizes. For simplifications that may be skipped."""
    if isinstance(condition, bool):
        return condition
    try:
        return bool(condition)
    except TypeError:  # sympy cannot tell from its assumptions (positive integers) alone
        pass
    env = _SHAPE_ENV.get()
    if env is None or any(p.exp.is_negative for p in condition.atoms(sympy.Pow)):
        return False  # a quotient of sizes: the ShapeEnv's range analysis logs a warning and gives up
    try:  # the ShapeEnv's static reasoning knows each symbol's range (>= 2) and asks nothing of the call
        answer = env._maybe_evaluate_static(condition)
    except Exception:  # noqa: BLE001 - its range analysis gives up on some expressions: unknown
        return False
    return answer is not None and bool(answer)


def thousands(value: Size) -> str:
    """`1,048,576`, or a symbolic size as its expression."""
    return str(value) if is_symbolic(value) else f"{int(value):,}"




def python_expr(value: Size) -> str:
    """Source text of a size for Python and Triton: sums, products, and floor division and modulo of
    sizes that are never negative."""
    return _printed(value, c=False)


def c_expr(value: Size) -> str:
    """Source text of a size for C++ (int64 arithmetic): the same, `/` for floor division."""
    return _printed(value, c=True)


def _printed(value: Size, c: bool) -> str:
    if not is_symbolic(value):
        return str(int(value))
    return _print(sympy.expand(value), c)


# torch's integer division and modulo over sizes (torch.utils._sympy.functions), by class name
_DIVISIONS = {"FloorDiv", "CleanDiv"}
_MODULOS = {"Mod", "PythonMod"}


def _print(expr: sympy.Expr, c: bool) -> str:
    """Integer arithmetic both Python and C++ read alike: sums, products, whole powers (as products),
    and // and % of operands that are never negative (where C++'s / and % agree with Python's)."""
    if isinstance(expr, (sympy.Symbol, sympy.Integer)):
        return str(expr)
    if isinstance(expr, sympy.Add):
        text = ""
        for term in sympy.Add.make_args(expr):
            printed = _print(term, c)
            text += printed if not text else f" - {printed[1:]}" if printed.startswith("-") else f" + {printed}"
        return text
    if isinstance(expr, sympy.Mul):
        factors = []
        for f in sympy.Mul.make_args(expr):
            text = _print(f, c)
            factors.append(f"({text})" if isinstance(f, sympy.Add) else text)
        return "*".join(factors).replace("-1*", "-", 1) if factors[0] == "-1" else "*".join(factors)
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        base = _print(expr.base, c)
        base = f"({base})" if isinstance(expr.base, sympy.Add) else base
        return "*".join([base] * int(expr.exp))
    name = type(expr).__name__
    if (name in _DIVISIONS or name in _MODULOS) and len(expr.args) == 2:
        left, right = expr.args
        if not (known(left >= 0) and known(right > 0)):  # C++ rounds a negative quotient the other way
            raise NotSymbolic(f"size expression {expr} divides a value that may be negative")
        op = "%" if name in _MODULOS else "/" if c else "//"
        return f"(({_print(sympy.expand(left), c)}) {op} ({_print(sympy.expand(right), c)}))"
    raise NotSymbolic(f"size expression {expr} has {name}, which our printers do not write")


def upper_max(*values: Size) -> Size:
    """An upper bound on the largest of nonnegative sizes: their max where sympy knows which is largest
    for every size, else their sum (for bounds that are compared against a limit, never printed)."""
    best: Size = values[0]
    for v in values[1:]:
        if not is_symbolic(best) and not is_symbolic(v):
            best = max(best, v)
            continue
        difference = sympy.expand(best - v)
        if difference.is_nonnegative:
            continue
        if difference.is_nonpositive:
            best = v
        else:  # which is larger depends on the sizes
            best = best + v
    return best


def symbols_in(obj: Any) -> tuple[str, ...]:
    """The names of the size symbols anywhere in an IR object (a kernel plan, an index, a value):
    what a kernel takes as size arguments, sorted as they are numbered (s2 before s10)."""
    import dataclasses

    if _SHAPE_ENV.get() is None:  # a graph of static sizes (the walk costs time on large plans)
        return ()
    found: set[str] = set()
    seen: set[int] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, sympy.Basic):
            found |= {s.name for s in item.free_symbols}
            continue
        if isinstance(item, (str, int, float, bool, type(None), torch.dtype)) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, (tuple, list, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
    return tuple(sorted(found, key=lambda name: (len(name), name)))
