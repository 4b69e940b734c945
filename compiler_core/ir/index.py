"""Index expressions: integer affine sums over loop variables, with floor-division and modulo atoms.

Every memory access in the loop IR is a flat storage offset written as an `Index`:

    Index.var("x0") * 1024 + Index.var("r0")        # prints as  1024*x0 + r0

Floor-division and modulo appear when a flat offset is mapped back to multi-dimensional loop
variables (inlining a producer, or splitting a flat kernel index).  `simplify`-style rules run as
expressions are built, using the known size of each variable, so that
`((1024*x0 + r0) // 1024)` becomes `x0` whenever `r0 < 1024`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from math import gcd
from types import MappingProxyType
from typing import Callable, Mapping, Union

import sympy
from torch.utils._sympy.functions import FloorDiv as SymFloorDiv

from compiler_core.ir.symbolic import as_size, c_expr, decide, hint, is_symbolic, known, python_expr

Ranges = Mapping[str, int]
NO_RANGES: Ranges = MappingProxyType({})  # no variable sizes known: no range-based simplification


@dataclass(frozen=True, order=True)
class Var:
    name: str


@dataclass(frozen=True, order=True)
class FloorDiv:
    arg: "Index"
    divisor: int


@dataclass(frozen=True, order=True)
class Mod:
    arg: "Index"
    divisor: int


Atom = Union[Var, FloorDiv, Mod]


@lru_cache(maxsize=1 << 16)  # repr of a nested atom is slow, and the same atoms are sorted again and again
def _atom_key(atom: Atom) -> tuple:
    # A total order over atoms of different kinds keeps terms canonical (for equality and printing).
    kind = {Var: 0, FloorDiv: 1, Mod: 2}[type(atom)]
    return (kind, repr(atom))


@dataclass(frozen=True)
class Index:
    """sum(coef * atom) + const, kept canonical: sorted atoms, no zero coefficients."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def of(value: "Index | int") -> "Index":
        return value if isinstance(value, Index) else Index((), as_size(value))

    @staticmethod
    def var(name: str) -> "Index":
        return Index(((Var(name), 1),), 0)

    @staticmethod
    def _build(coefs: dict, const: int) -> "Index":
        coefs, extra_const = _fold_div_mod_pairs(dict(coefs))
        const += extra_const
        terms = tuple((a, c) for a, c in coefs.items() if c != 0)
        if len(terms) > 1:
            terms = tuple(sorted(terms, key=lambda t: _atom_key(t[0])))
        return Index(terms, as_size(const))

    def __add__(self, other: "Index | int") -> "Index":
        other = Index.of(other)
        coefs = dict(self.terms)
        for atom, coef in other.terms:
            coefs[atom] = coefs.get(atom, 0) + coef
        return Index._build(coefs, self.const + other.const)

    __radd__ = __add__

    def __mul__(self, factor: int) -> "Index":
        if isinstance(factor, Index):
            if factor.terms:
                raise ValueError("index expressions stay affine: multiply by an integer only")
            factor = factor.const
        factor = as_size(factor)
        if factor == 1:
            return self
        return Index._build({a: c * factor for a, c in self.terms}, self.const * factor)

    __rmul__ = __mul__

    def __sub__(self, other: "Index | int") -> "Index":
        return self + Index.of(other) * -1

    # ---- queries ------------------------------------------------------------------------
    def free_vars(self) -> set[str]:
        names: set[str] = set()
        for atom, _ in self.terms:
            if isinstance(atom, Var):
                names.add(atom.name)
            else:
                names |= atom.arg.free_vars()
        return names

    def bounds(self, ranges: Ranges) -> tuple[int, int] | None:
        """Inclusive [min, max] over the variables' ranges, or None if a variable is unknown."""
        lo = hi = self.const
        for atom, coef in self.terms:
            b = _atom_bounds(atom, ranges)
            if b is None:
                return None
            a_lo, a_hi = b  # a_lo <= a_hi: the sign of coef says which end is which
            if decide(coef < 0):
                a_lo, a_hi = a_hi, a_lo
            lo += coef * a_lo
            hi += coef * a_hi
        return lo, hi

    # ---- transformation -----------------------------------------------------------------
    def subs(self, mapping: Mapping[str, "Index"], ranges: Ranges = NO_RANGES) -> "Index":
        # One sum built at the end, not one Index per term: subs runs for every load of every plan.
        coefs: dict = {}
        const = self.const
        for atom, coef in self.terms:
            if isinstance(atom, Var):
                value = mapping.get(atom.name)
                if value is None:
                    # A variable whose range is one value is that value: a size-1 dim (batch 1) must not
                    # make two spellings of one element differ (16*x0 + x1 and x1 where x0 < 1).
                    value = _ZERO if ranges.get(atom.name) == 1 else Index.var(atom.name)
            elif isinstance(atom, FloorDiv):
                value = floordiv(atom.arg.subs(mapping, ranges), atom.divisor, ranges)
            else:
                value = mod(atom.arg.subs(mapping, ranges), atom.divisor, ranges)
            for a, c in value.terms:
                coefs[a] = coefs.get(a, 0) + c * coef
            const += value.const * coef
        return Index._build(coefs, const)

    def simplify(self, ranges: Ranges) -> "Index":
        return self.subs({}, ranges)

    @cached_property
    def is_static(self) -> bool:
        """No symbolic size in it (its decisions then depend on nothing but its numbers)."""
        return type(self.const) is int and all(
            type(coef) is int and (isinstance(atom, Var) or (type(atom.divisor) is int and atom.arg.is_static))
            for atom, coef in self.terms)

    # ---- printing -----------------------------------------------------------------------
    def render(self, name: Callable[[str], str] = str, div: str = "//") -> str:
        """Print with a variable-name mapper and a floor-division operator ('//' or '/')."""
        parts: list[str] = []
        for atom, coef in self.terms:
            text = _render_atom(atom, name, div)
            if coef == 1:
                parts.append(text)
            elif coef == -1:
                parts.append(f"-{text}")
            elif is_symbolic(coef):  # printed for the backend (div "/": C++); a sum prints in parentheses
                parts.append(f"{python_expr(coef) if div == '//' else c_expr(coef)}*{text}")
            else:
                parts.append(f"{coef}*{text}")
        if self.const != 0 or not parts:
            if is_symbolic(self.const):
                parts.append(python_expr(self.const) if div == "//" else c_expr(self.const))
            else:
                parts.append(str(self.const))
        out = " + ".join(parts)
        return out.replace("+ -", "- ")

    def __str__(self) -> str:
        return self.render()

    def __repr__(self) -> str:
        return f"Index({self.render()})"


_ZERO = Index.of(0)


def _render_atom(atom: Atom, name: Callable[[str], str], div: str) -> str:
    if isinstance(atom, Var):
        return name(atom.name)
    op = div if isinstance(atom, FloorDiv) else "%"
    if is_symbolic(atom.divisor):
        divisor = f"({python_expr(atom.divisor) if div == '//' else c_expr(atom.divisor)})"
    else:
        divisor = atom.divisor
    return f"(({atom.arg.render(name, div)}) {op} {divisor})"


def _atom_bounds(atom: Atom, ranges: Ranges) -> tuple[int, int] | None:
    if isinstance(atom, Var):
        size = ranges.get(atom.name)
        return None if size is None else (0, size - 1 if is_symbolic(size) else max(size - 1, 0))
    inner = atom.arg.bounds(ranges)
    if isinstance(atom, FloorDiv):
        return None if inner is None else (_floor(inner[0], atom.divisor), _floor(inner[1], atom.divisor))
    return (0, atom.divisor - 1)


def _fold_div_mod_pairs(coefs: dict) -> tuple[dict, int]:
    # k*D*(e // D) + k*(e % D) == k*e: recovers a flat index split into (row, column).
    # Repeats until nothing folds, so a flat index split into several dims is rebuilt whole.
    extra_const = 0
    changed = True
    while changed:
        changed = False
        for atom in [a for a in coefs if isinstance(a, Mod)]:
            k = coefs.get(atom, 0)
            partner = floordiv(atom.arg, atom.divisor)
            if not k or len(partner.terms) != 1 or partner.const != 0 or partner.terms[0][1] != 1:
                continue
            partner_atom = partner.terms[0][0]
            if coefs.get(partner_atom, 0) != k * atom.divisor:
                continue
            del coefs[atom]
            del coefs[partner_atom]
            for inner_atom, inner_coef in atom.arg.terms:
                coefs[inner_atom] = coefs.get(inner_atom, 0) + k * inner_coef
            extra_const += k * atom.arg.const
            coefs = {a: c for a, c in coefs.items() if c != 0}
            changed = True
            break
    return coefs, extra_const


def _split(expr: Index, divisor: int) -> tuple[Index, Index]:
    """expr = divisor*quotient_part + remainder_part, by coefficients (no range reasoning)."""
    q_terms: dict = {}
    r_terms: dict = {}
    for atom, coef in expr.terms:
        quotient, rest = _divmod(coef, divisor)
        if rest == 0:
            q_terms[atom] = quotient
        else:
            r_terms[atom] = coef
    quotient, rest = _divmod(expr.const, divisor)
    return Index._build(q_terms, quotient), Index._build(r_terms, rest)


def _divmod(a: int, b: int) -> tuple[int, int]:
    """(q, r) with a == b*q + r: Python's divmod for numbers. For sizes, (a/b, 0) where b divides a
    as polynomials (32*s - 32 by s - 1) and else (0, a): sympy's // and % of sizes would leave floor()
    and 1/s terms that no kernel can print."""
    if not is_symbolic(a) and not is_symbolic(b):
        return divmod(int(a), int(b))
    return _symbolic_divmod(a, b)


@lru_cache(maxsize=1 << 16)
def _symbolic_divmod(a: int, b: int) -> tuple[int, int]:
    # sympy's cancel takes milliseconds, and index arithmetic asks the same few quotients over and
    # over: Swin's window partition with symbolic sizes asked 29,016 times (150 s of its compile).
    # `together`: cancel leaves a sum of fractions as it is ((-s1 - 9*s2)/252 -> -s1/252 - s2/28),
    # whose `fraction` has denominator 1; a quotient with a rational coefficient then dropped a
    # pad's symbolic offset from a floor division (a wrong channel read, errors above 1).
    numerator, denominator = sympy.fraction(sympy.together(sympy.cancel(sympy.sympify(a) / b)))
    return (as_size(numerator), 0) if denominator == 1 else (0, a)


def _floor(a: int, b: int) -> int:
    """a // b for bounds: torch's FloorDiv for sizes (the ShapeEnv reasons about it; sympy's floor of
    a quotient it cannot)."""
    if not is_symbolic(a) and not is_symbolic(b):
        return int(a) // int(b)
    quotient, rest = _divmod(a, b)
    return quotient if rest == 0 else as_size(SymFloorDiv(a, b))


def _common_factor(expr: Index, divisor: int, ranges: Ranges) -> tuple[int, Index, Index] | None:
    """(g, scaled, small) with expr == g*scaled + small, 0 <= small < g, g a divisor of `divisor` > 1.

    A flat index reshaped to other dims meets `(16*x0 + x1) // 48` with x1 < 16: that is
    `x0 // 3`, which then pairs with `x0 % 3` and folds back to x0."""
    if is_symbolic(divisor) or any(is_symbolic(c) for _, c in expr.terms):
        # Symbolic sizes: sympy's gcd of polynomials (gcd(128, 128*s0) = 128); largest by the example's sizes.
        found = {sympy.gcd(coef, divisor) for _, coef in expr.terms} - {sympy.Integer(1), divisor}
        candidates = sorted((as_size(g) for g in found), key=hint, reverse=True)
    else:
        candidates = sorted({gcd(coef, divisor) for _, coef in expr.terms} - {1, divisor}, reverse=True)
    for g in candidates:
        if _divmod(divisor, g)[1] != 0:
            continue
        split = {a: _divmod(c, g) for a, c in expr.terms}
        big = {a: q for a, (q, r) in split.items() if r == 0}
        const_q, const_r = _divmod(expr.const, g)
        small = Index._build({a: c for a, c in expr.terms if split[a][1] != 0}, const_r)
        b = small.bounds(ranges)
        if b is not None and known(0 <= b[0]) and known(b[1] < g):
            return g, Index._build(big, const_q), small
    return None


def floordiv(expr: "Index | int", divisor: int, ranges: Ranges = NO_RANGES) -> Index:
    expr = Index.of(expr)
    divisor = as_size(divisor)
    if divisor == 1:
        return expr
    quotient, remainder = _split(expr, divisor)
    b = remainder.bounds(ranges)
    if b is not None and known(0 <= b[0]) and known(b[1] < divisor):
        return quotient
    if b is not None and known(b[0] >= 0):
        # Pull the exactly-divisible part out: (D*q + r) // D == q + r // D for r >= 0.
        common = _common_factor(remainder, divisor, ranges)
        if common is not None:  # (g*e + s) // (g*k) == e // k when 0 <= s < g
            g, scaled, _ = common
            return quotient + floordiv(scaled, _divmod(divisor, g)[0], ranges)
        return quotient + _floordiv_atom(remainder, divisor)
    return _floordiv_atom(expr, divisor)


def _floordiv_atom(expr: Index, divisor: int) -> Index:
    # (e // a) // b == e // (a*b): one canonical form, so div/mod pairs can be recognised.
    if expr.const == 0 and len(expr.terms) == 1 and expr.terms[0][1] == 1 and isinstance(expr.terms[0][0], FloorDiv):
        inner = expr.terms[0][0]
        return _floordiv_atom(inner.arg, inner.divisor * divisor)
    return Index(((FloorDiv(expr, divisor), 1),), 0)


def mod(expr: "Index | int", divisor: int, ranges: Ranges = NO_RANGES) -> Index:
    expr = Index.of(expr)
    divisor = as_size(divisor)
    if divisor == 1:
        return Index.of(0)
    _, remainder = _split(expr, divisor)
    b = remainder.bounds(ranges)
    if b is not None and known(0 <= b[0]) and known(b[1] < divisor):
        return remainder
    if b is not None and known(b[0] >= 0):
        common = _common_factor(remainder, divisor, ranges)
        if common is not None:  # (g*e + s) % (g*k) == g*(e % k) + s when 0 <= s < g
            g, scaled, small = common
            return mod(scaled, _divmod(divisor, g)[0], ranges) * g + small
        return Index(((Mod(remainder, divisor), 1),), 0)
    return Index(((Mod(expr, divisor), 1),), 0)


def linear_index(names: list[str], strides: tuple[int, ...], offset: int = 0) -> Index:
    """offset + sum(stride_k * names[k]): the address of an element of a strided tensor."""
    result = Index.of(offset)
    for name, stride in zip(names, strides):
        result = result + Index.var(name) * stride
    return result


@lru_cache(maxsize=1 << 16)
def subs_static(index: Index, mapping: tuple, ranges: tuple) -> Index:
    """`index.subs(dict(mapping), dict(ranges))`, remembered: for static indices, mappings and ranges
    only (a decision about symbolic sizes depends on the graph's shape environment). The scheduler
    substitutes the same load indices again for every candidate group a node is part of."""
    return index.subs(dict(mapping), dict(ranges))


def all_static(mapping: Mapping[str, Index], ranges: Ranges) -> bool:
    return all(type(r) is int for r in ranges.values()) and all(m.is_static for m in mapping.values())


@lru_cache(maxsize=1 << 16)
def bounds_static(index: Index, ranges: tuple) -> "tuple[int, int] | None":
    """`index.bounds(dict(ranges))`, remembered, for static indices and ranges (as subs_static)."""
    return index.bounds(dict(ranges))

