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
import dataclasses
import functools
import weakref
from typing import Any, Iterator, Optional, Union

import sympy
import torch

Size = Union[int, sympy.Expr]

# False: every graph with symbolic sizes is compiled per concrete size (per_size.py), as before
# symbolic kernels; tests of that path turn it off.
ENABLED = True

_SHAPE_ENV: contextvars.ContextVar[Optional[Any]] = contextvars.ContextVar("fcompile_shape_env", default=None)
# (bound, limit) pairs `fits` answered True for during the compilation of the current graph, guarded at its end
_BOUNDS: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar("fcompile_bounds", default=None)


@dataclasses.dataclass(frozen=True)
class SizeRatio:
    """A float made from sizes, numerator / denominator (torch's IntTrueDiv, batch norm's n / (n - 1)):
    computed where a kernel or the host program reads it."""

    numerator: Size
    denominator: Size


def python_number(value: Any) -> str:
    """Source text of a host-program value that is a number: an int or float literal, a size
    expression, or a ratio of sizes (a saved SymFloat the forward hands the backward)."""
    if isinstance(value, SizeRatio):
        return f"({python_expr(value.numerator)} / {python_expr(value.denominator)})"
    if is_symbolic(value):
        return python_expr(value)
    return repr(value)


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
        return _integral(value)
    return int(value)


@functools.lru_cache(maxsize=1 << 14)
def _integral(expr: sympy.Expr) -> Size:
    """expr as a size, refusing a fraction: `int()` would truncate 1/28 to 0 and an index with a
    rational coefficient has lost part of an offset (every size is an integer), so either is a
    compiler bug. Raised as NotSymbolic: the graph is compiled per size, correct and slower."""
    if expr.is_number:
        if not (expr.is_Integer or (expr.is_Float and float(expr).is_integer())):
            raise NotSymbolic(f"size {expr} is not an integer")
        return int(expr)
    if any(not r.is_Integer for r in expr.atoms(sympy.Rational)):
        raise NotSymbolic(f"size expression {expr} has a fractional coefficient")
    return expr


def is_symbolic(value: Any) -> bool:
    return isinstance(value, sympy.Basic) and not value.is_number






@contextlib.contextmanager
def shape_env_of(gm: torch.fx.GraphModule) -> Iterator[Optional[Any]]:
    """The ShapeEnv of a graph traced with symbolic sizes, current while it compiles (None: static)."""
    token, bounds = _SHAPE_ENV.set(find_shape_env(gm)), _BOUNDS.set([])
    try:
        yield _SHAPE_ENV.get()
        _guard_largest(_BOUNDS.get())  # before the backend returns: Dynamo installs the guards after it
    finally:
        _SHAPE_ENV.reset(token)
        _BOUNDS.reset(bounds)


def find_shape_env(gm: torch.fx.GraphModule) -> Optional[Any]:
    """The ShapeEnv behind the first symbolic size among the graph's values, or None; found once per
    graph (the backend and the compilation both ask)."""
    if gm in _FOUND:
        return _FOUND[gm]
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
    _FOUND[gm] = env
    return env


# graph -> its ShapeEnv, weakly: not in gm.meta, which deep copies and pickles would carry along
_FOUND: "weakref.WeakKeyDictionary[torch.fx.GraphModule, Any]" = weakref.WeakKeyDictionary()


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
    memo = memo_of_env("hint")
    answer = memo.get(value)
    if answer is None:
        values = getattr(env, "backed_var_to_val", None)  # torch 2.13's name; var_to_val in 2.11
        answer = memo[value] = int(value.xreplace(values if values is not None else env.var_to_val))
    return answer


def memo_of_env(kind: str) -> Optional[dict]:
    """A dict kept for the current ShapeEnv (None outside a symbolic compilation), one per `kind`: for
    answers that depend on the sizes' example values or on the guards already made, which stay
    fixed (the values) or only grow (the guards) while the ShapeEnv lives. Deciding again what was
    decided adds no guard, so a remembered answer is the one a new question would get."""
    env = _SHAPE_ENV.get()
    if env is None:
        return None
    return _MEMOS.setdefault(env, {}).setdefault(kind, {})


_MEMOS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


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
    env = _env()
    if any(p.exp.is_negative for p in condition.atoms(sympy.Pow)) or condition.atoms(sympy.floor, sympy.ceiling):
        # Dynamo prints each guard as Python source: its printer refuses these (and would fail the call)
        raise NotSymbolic(f"cannot keep {condition} as a guard")
    try:
        return bool(env.evaluate_expr(condition))
    except Exception as exc:  # noqa: BLE001 - e.g. its range analysis on a quotient of sizes
        raise NotSymbolic(f"cannot decide {condition} ({type(exc).__name__}: {exc})") from exc


def fits(bound: Size, limit: int) -> bool:
    """Whether `bound <= limit`, for a choice where "no" is always correct and "yes" is only faster
    (int32 index arithmetic where offsets fit): the example call's answer. A "no" needs no guard (a
    smaller call may use the slower code); a "yes" over symbolic sizes is kept until the graph is
    compiled, and only the largest of its bounds become guards: one or two conditions for a graph
    whose every kernel asked, where each would otherwise have added its own."""
    if not is_symbolic(bound):
        return bound <= limit
    if _SHAPE_ENV.get() is None:
        raise NotSymbolic(f"a symbolic bound {bound} outside a symbolic compilation")
    if hint(bound) > limit:
        return False
    pending = _BOUNDS.get()
    if pending is None:
        return decide(bound <= limit)
    pending.append((sympy.expand(bound), limit))
    return True


def _guard_largest(bounds: list[tuple[sympy.Expr, int]]) -> None:
    """Guards `bound <= limit` for the bounds no other one of the same limit is known to exceed for
    every size (the others then hold too). Largest first (at the example call), so that a kept bound
    usually covers the rest and each bound is compared with few."""
    kept: list[tuple[sympy.Expr, int]] = []
    for bound, limit in sorted(set(bounds), key=lambda pair: (pair[1], -hint(pair[0]))):
        if not any(limit == top_limit and _covers(top, bound) for top, top_limit in kept):
            kept.append((bound, limit))
    for bound, limit in kept:
        if not decide(bound <= limit):  # the example call's answer was yes: this cannot happen
            raise NotSymbolic(f"{bound} <= {limit} held at the example call and not when guarded")


def _covers(top: sympy.Expr, bound: sympy.Expr) -> bool:
    """Whether `top >= bound` for every size: sympy's sign of the difference (positive sizes), else
    the ShapeEnv's ranges (its sizes are >= 2). Two cheap answers first: sizes at which the difference
    is negative say no, and a difference that only grows with every size and is not negative at the
    smallest sizes says yes. Most pairs of a graph's bounds are in different sizes (64*s27*s52 against
    64*s52*s96), and the ShapeEnv took ~20 ms a pair to answer (T5's training step: 3 s of a 30 s
    compile)."""
    difference = sympy.expand(top - bound)
    smallest, *large = _sample_sizes(difference.free_symbols)
    if any(_negative_at(difference, point) for point in (smallest, *large)):
        return False
    if _grows_with_every_size(difference):
        return True  # its least value is at the smallest sizes, just checked
    return difference.is_nonnegative is True or known(difference >= 0)


def _negative_at(expr: sympy.Expr, point: dict) -> bool:
    value = sympy.sympify(expr.xreplace(point))  # a lone symbol gives back the int itself
    try:
        return bool(value.is_number and value.is_real and value < 0)
    except TypeError:  # a division by a size of 0, say: no answer from this point
        return False


def _grows_with_every_size(expr: sympy.Expr) -> bool:
    """Whether `expr` is a constant plus non-negative multiples of products of positive powers of
    positive size symbols: then it does not decrease when any size grows."""
    def monomial(term) -> bool:
        factors = term.args if isinstance(term, sympy.Mul) else (term,)
        return all(f.is_Symbol and f.is_positive or isinstance(f, sympy.Pow) and f.base.is_Symbol
                   and f.base.is_positive and f.exp.is_Integer and f.exp > 0 for f in factors)
    return all(term == 1 or (coefficient >= 0 and monomial(term))
               for term, coefficient in expr.as_coefficients_dict().items())


def _sample_sizes(symbols: set) -> list[dict]:
    """Values the symbols may take, as points to try an inequality at: all at their smallest (the
    ShapeEnv's lower bound; where it has none, 0 for a non-negative symbol, else -2^40), then each in
    turn large (2^40, or its largest allowed) with the others smallest. A value the ShapeEnv would not
    allow can only make `_covers` say no where yes was true: one guard more, never a wrong one."""
    env = _SHAPE_ENV.get()
    ranges = getattr(env, "var_to_range", {}) if env is not None else {}

    def ends(symbol) -> tuple[int, int]:
        r = ranges.get(symbol)
        lower = _finite_int(r.lower) if r is not None else None
        if lower is None or lower < -2**40:  # a symbol with no lower end (a pad amount): far below zero
            lower = 0 if symbol.is_nonnegative else -2**40
        upper = _finite_int(r.upper) if r is not None else None
        upper = 2**40 if upper is None or upper > 2**40 else upper
        return lower, max(upper, lower)

    limits = {symbol: ends(symbol) for symbol in symbols}
    smallest = {symbol: low for symbol, (low, _) in limits.items()}
    return [smallest] + [{**smallest, symbol: high} for symbol, (_, high) in limits.items()]


def _finite_int(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError, AttributeError, OverflowError):  # torch's int_oo, sympy's oo
        return None


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
    if env is None:
        return False
    # Index arithmetic asks the same conditions again and again (Swin's symbolic window partition:
    # 186,502 questions, 37 s of its compile), so the answers are kept per ShapeEnv. A guard added
    # later only narrows the sizes allowed: a condition known for all of them stays known, and one
    # not known stays skipped, which is only slower code, never wrong.
    answers = memo_of_env("known")
    if condition not in answers:
        answers[condition] = _known_by_ranges(env, condition)
    return answers[condition]


def _known_by_ranges(env: Any, condition: Any) -> bool:
    if any(p.exp.is_negative for p in condition.atoms(sympy.Pow)):
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
    """Source text of a size for Python and Triton: sums, products, and floor division and modulo by
    a positive size."""
    return _printed(value, c=False)


def c_expr(value: Size) -> str:
    """Source text of a size for C++ (int64 arithmetic): the same, `/` for floor division."""
    return _printed(value, c=True)


def _printed(value: Size, c: bool) -> str:
    """Self-delimiting: a sum or a choice prints in parentheses, so the text can stand anywhere in an
    expression (`32*(s0 - 1)`, never `32*s0 - 1`)."""
    if not is_symbolic(value):
        return str(int(value))
    return _factor(sympy.expand(value), c)


# torch's integer division and modulo over sizes (torch.utils._sympy.functions), by class name
_DIVISIONS = {"FloorDiv", "CleanDiv"}
_MODULOS = {"Mod", "PythonMod"}


def _print(expr: sympy.Expr, c: bool) -> str:
    """Integer arithmetic both Python and C++ read alike: sums, products, whole powers (as products),
    and // and % by a positive divisor, written so that C++'s truncating / and % give Python's
    floor results where the dividend may be negative."""
    if isinstance(expr, (sympy.Symbol, sympy.Integer)):
        return str(expr)
    if isinstance(expr, sympy.Add):
        text = ""
        for term in sympy.Add.make_args(expr):
            printed = _print(term, c)
            text += printed if not text else f" - {printed[1:]}" if printed.startswith("-") else f" + {printed}"
        return text
    if isinstance(expr, sympy.Mul):
        factors = [_factor(f, c) for f in sympy.Mul.make_args(expr)]
        return "*".join(factors).replace("-1*", "-", 1) if factors[0] == "-1" else "*".join(factors)
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        return "*".join([_factor(expr.base, c)] * int(expr.exp))
    name = type(expr).__name__
    if name in ("Max", "Min"):
        return _print(sympy.expand(_extreme(expr, largest=name == "Max")), c)
    if name in ("CeilToInt", "FloorToInt") and type(expr.args[0]).__name__ == "IntTrueDiv":
        # torch's integer ceil/floor of a true division of sizes (MobileViT's `math.ceil(h / 2)`)
        name, (numerator, denominator) = ("ceiling" if name == "CeilToInt" else "floor"), expr.args[0].args
    elif name in ("floor", "ceiling"):  # of a quotient of sizes (adaptive pooling's window starts)
        numerator, denominator = sympy.fraction(sympy.cancel(sympy.together(expr.args[0])))
    if name in ("floor", "ceiling"):
        if any(p.exp.is_negative for p in (numerator + denominator).atoms(sympy.Pow)) or \
                not (numerator.is_integer and denominator.is_integer):
            raise NotSymbolic(f"size expression {expr} is not the {name} of a quotient of sizes")
        if denominator == 1:
            return _print(sympy.expand(numerator), c)
        if name == "ceiling":  # ceil(p / q) = floor((p + q - 1) / q) for q > 0
            numerator = numerator + denominator - 1
        name, expr = "FloorDiv", sympy.Function("FloorDiv")(numerator, denominator)
    if (name in _DIVISIONS or name in _MODULOS) and len(expr.args) == 2:
        left, right = expr.args
        a, b = _print(sympy.expand(left), c), _print(sympy.expand(right), c)
        div = "/" if c else "//"
        if name == "CleanDiv" or (known(left >= 0) and known(right > 0)):  # C++ and Python agree
            return f"(({a}) {'%' if name in _MODULOS else div} ({b}))"
        if not known(right > 0) and (_SHAPE_ENV.get() is None or not decide(right > 0)):  # kept as a guard
            raise NotSymbolic(f"size expression {expr} divides by a value that is not positive")
        # A dividend that may be negative: C++ (and compiled Triton) truncate where Python floors.
        # ((a % b) + b) % b is Python's a % b under either rule, and a - that is an exact multiple of b.
        modulo = f"((({a}) % ({b}) + ({b})) % ({b}))"
        return modulo if name in _MODULOS else f"((({a}) - {modulo}) {div} ({b}))"
    raise NotSymbolic(f"size expression {expr} has {name}, which our printers do not write")


def _factor(expr: sympy.Expr, c: bool) -> str:
    """One operand of a product, in parentheses unless it is a name, a number or already enclosed
    (a Max that resolves to `s0 - 1` must not print as `32*s0 - 1`)."""
    text = _print(expr, c)
    if isinstance(expr, (sympy.Symbol, sympy.Integer)) or _enclosed(text):  # sympy puts a number first
        return text
    return f"({text})"


def _enclosed(text: str) -> bool:
    """Whether the first character's parenthesis closes at the last character."""
    if not text.startswith("("):
        return False
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i == len(text) - 1
    return False


def _extreme(expr: sympy.Expr, largest: bool) -> Size:
    """The argument of Max/Min that wins for every size, else the one that wins for the example call,
    kept as a guard (`Max(1, s0//5 - 1)` is `s0//5 - 1` while s0 >= 10)."""
    args = list(expr.args)
    wins = (lambda a, b: a >= b) if largest else (lambda a, b: a <= b)
    for a in args:
        if all(b is a or known(wins(a, b)) for b in args):
            return a
    if _SHAPE_ENV.get() is None:
        raise NotSymbolic(f"size expression {expr}: which argument wins depends on the sizes")
    pick = (max if largest else min)(args, key=hint)
    if not all(b is pick or decide(wins(pick, b)) for b in args):
        raise NotSymbolic(f"size expression {expr}: no argument wins")
    return pick


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
