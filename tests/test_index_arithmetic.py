"""Index arithmetic with symbolic sizes, checked by numbers: every floor division, modulo and layout
inversion the compiler builds must equal Python's integer arithmetic once the symbols take values.

A rational coefficient in an index is always a bug (every size is an integer): a quotient such as
`(-s1 - 9*s2) // 252` once came back as `-s1/252 - s2/28`, and the pad offset it belonged to then
vanished from a modulo, so a padded producer read the wrong channel (a silent wrong answer)."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import sympy

from compiler_core.ir.graph import Layout
from compiler_core.ir.index import FloorDiv, Index, Mod, Var, _divmod, floordiv, mod
from compiler_core.ir.symbolic import NotSymbolic, as_size
from compiler_core.schedule.kernel_plan import _inverted

S1, S2 = sympy.symbols("s1 s2", integer=True, positive=True)
SYMBOL_VALUES = [{S1: a, S2: b} for a, b in [(1, 1), (2, 3), (5, 2), (13, 7)]]


def _number(size, symbols: dict) -> int:
    return _number_at(size, tuple(symbols.items()))


@functools.lru_cache(maxsize=None)  # the same few sizes at the same few values, thousands of times
def _number_at(size, symbols: tuple) -> int:
    value = sympy.sympify(size).subs(dict(symbols))
    assert value.is_Integer, f"{size} is not an integer at {dict(symbols)}: {value}"
    return int(value)


def evaluate(index: Index, env: dict, symbols: dict) -> int:
    """The index's value, Python's floor division and modulo (what the kernels compute for the lanes they read)."""
    total = _number(index.const, symbols)
    for atom, coef in index.terms:
        if isinstance(atom, Var):
            value = env[atom.name]
        elif isinstance(atom, FloorDiv):
            value = evaluate(atom.arg, env, symbols) // _number(atom.divisor, symbols)
        else:
            assert isinstance(atom, Mod)
            value = evaluate(atom.arg, env, symbols) % _number(atom.divisor, symbols)
        total += _number(coef, symbols) * value
    return total


X = [Index.var(f"x{i}") for i in range(4)]
OFFSETS = {
    "pad (symbolic shift)": X[0] * 252 + X[1] * 63 + X[2] * 9 + X[3] + (-S1 - 9 * S2),
    "pad (positive shift)": X[0] * 252 + X[1] * 63 + X[2] * 9 + X[3] + (2 * S1 + 5),
    "symbolic row": X[0] * (S1 + 11) + X[1] + S2,
    "symbolic stride and shift": X[0] * (4 * S1) + X[1] * 4 + X[2] + (3 * S2 + 1),
}
DIVISORS = [1, 4, 9, 63, 252, S1 + 11, 4 * S1]


@pytest.mark.parametrize("name", OFFSETS)
@pytest.mark.parametrize("divisor", DIVISORS, ids=str)
def test_floordiv_and_mod_of_a_shifted_index_equal_pythons(name, divisor):
    expr = OFFSETS[name]
    ranges = {"x0": 3, "x1": 4, "x2": 7, "x3": 9}
    quotient, remainder = floordiv(expr, divisor, ranges), mod(expr, divisor, ranges)
    for symbols in SYMBOL_VALUES:
        d = _number(divisor, symbols)
        for xs in itertools.product(range(3), range(4), range(0, 7, 3), range(0, 9, 4)):
            env = {f"x{i}": v for i, v in enumerate(xs)}
            value = evaluate(expr, env, symbols)
            assert evaluate(quotient, env, symbols) == value // d, (quotient, env, symbols)
            assert evaluate(remainder, env, symbols) == value % d, (remainder, env, symbols)


def test_the_inverted_layout_finds_the_element_at_a_symbolically_shifted_offset():
    """F.pad's read of its producer: the element at flat offset `x - left - top*W` (left and top symbols)."""
    layout = Layout.contiguous((3, 4, 7, 9))
    offset = OFFSETS["pad (symbolic shift)"]
    ranges = {"x0": 3, "x1": 4, "x2": S2 + 9, "x3": S1 + 11}
    mapping = _inverted(layout, offset, ranges)
    checked = 0
    for symbols in SYMBOL_VALUES:
        for xs in itertools.product(range(3), range(4), range(9), range(11)):
            env = {f"x{i}": v for i, v in enumerate(xs)}
            flat = evaluate(offset, env, symbols)
            if not 0 <= flat < layout.numel:  # a lane the pad's mask keeps from reading
                continue
            coords = [evaluate(mapping[f"x{d}"], env, symbols) for d in range(4)]
            assert all(0 <= c < n for c, n in zip(coords, layout.size)), (coords, env, symbols)
            assert sum(c * s for c, s in zip(coords, layout.stride)) == flat, (mapping, env, symbols)
            checked += 1
    assert checked > 1000


def test_a_symbolic_quotient_is_exact_or_refused():
    assert _divmod(-S1 - 9 * S2, 252) == (0, -S1 - 9 * S2)
    assert _divmod(252 * S1 + 504, 252) == (S1 + 2, 0)
    assert _divmod(32 * S1 - 32, S1 - 1) == (32, 0)
    assert _divmod(S1 + S2, 2) == (0, S1 + S2)


@pytest.mark.parametrize("size", [sympy.Rational(1, 28), S1 / 28, S1 / 2 + S2, sympy.Float(2.5)], ids=str)
def test_a_fractional_size_is_refused_not_truncated(size):
    with pytest.raises(NotSymbolic):
        as_size(size)


def test_integral_sizes_pass():
    assert as_size(sympy.Integer(7)) == 7 and type(as_size(sympy.Integer(7))) is int
    assert as_size(sympy.Float(3.0)) == 3
    assert as_size(2 * S1 + 3) == 2 * S1 + 3
    assert math.prod([as_size(sympy.Integer(2)), 3]) == 6
