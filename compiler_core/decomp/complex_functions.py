"""Complex elementary functions on real pairs: exp, log, sqrt, pow, and the trigonometric and
hyperbolic functions, as rules of the complex rewrite (complex_pairs.py).

Each gives the value eager PyTorch gives on the CPU, which is glibc's (cexp, clog, csqrt, cpow,
csin ... ctanh, through libstdc++'s std::complex): the formula, plus C's Annex G values where a part
is zero, infinite or NaN, and scaled products where an intermediate (exp(x), cosh(x)) overflows
although the result is finite. Complex64 is computed in float64 where a float32 intermediate would
overflow first. `tests/test_complex.py` compares each with eager on grids of such edges.
"""

from __future__ import annotations

import cmath
import math
from typing import Any

import torch
from torch.fx import Node

from compiler_core.decomp.complex_pairs import (
    NotRealPairs,
    Operand,
    _Complex,
    _div,
    _identity,
    _mul,
    _Rewrite,
    _rule,
)

aten = torch.ops.aten


def _exp_product(rw: _Rewrite, a: Node, factor: Node) -> Node:
    """exp(a) * factor, finite where the product is although exp(a) overflows (a > 700 in float64):
    there exp(a + log|factor|) with factor's sign."""
    naive = rw.mul(rw.emit(aten.exp.default, a), factor)
    scaled = rw.mul(rw.emit(aten.exp.default, rw.add(a, rw.emit(aten.log.default, rw.emit(aten.abs.default, factor)))),
                    rw.emit(aten.sign.default, factor))
    return rw.emit(aten.where.self, rw.emit(aten.gt.Scalar, a, 700.0), scaled, naive)


@_rule(aten.exp)
def _exp(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """cexp as C's Annex G and glibc give it: exp(x) (cos y, sin y) without overflow where the result
    is finite (complex64 in float64), cexp(x + i0) = (exp x, 0) for every x (a NaN part would come
    from inf * 0 otherwise), and for an infinite x with y infinite or NaN, (inf, NaN) or (0, 0).
    A plain exp(x) * cos(y) gave (inf, NaN) for exp(100 + 0j) in complex64."""
    re, im = rw.parts(value)
    if re.meta["val"].dtype == torch.float32:
        re, im = (rw.emit(aten._to_copy.default, p, dtype=torch.float64, suffix="_f64") for p in (re, im))
    out_re = _exp_product(rw, re, rw.emit(aten.cos.default, im))
    out_im = _exp_product(rw, re, rw.emit(aten.sin.default, im))
    out_im = rw.emit(aten.where.self, rw.emit(aten.eq.Scalar, im, 0), im, out_im)
    unbounded = rw.emit(aten.logical_and.default, rw.emit(aten.isinf.default, re), rw.emit(
        aten.logical_not.default, rw.emit(aten.lt.Scalar, rw.emit(aten.abs.default, im), math.inf)))
    positive = rw.emit(aten.gt.Scalar, re, 0)
    zero = rw.emit(aten.full_like.default, re, 0.0)
    out_re = rw.emit(aten.where.self, unbounded, rw.emit(aten.where.self, positive, re, zero), out_re)
    out_im = rw.emit(aten.where.self, unbounded, rw.emit(aten.where.self, positive, rw.sub(im, im), zero), out_im)
    return rw.complex_of(node, out_re, out_im)


@_rule(aten.exp2)
def _exp2(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """2 ** z as ATen's vectorised CPU kernel computes it: exp of z with each part times log 2 (in the
    parts' dtype), which matched eager's complex64 exp2 in 100,000 of 100,000 random elements; not
    C's cpow(2, z), which differs in the last bit in about half of them."""
    re, im = rw.parts(value)
    return _exp(rw, node, rw.complex_of(node, rw.mul(re, math.log(2.0)), rw.mul(im, math.log(2.0))))


@_rule(aten.sigmoid)
def _sigmoid(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """1 / (1 + exp(-z)), ATen's formula (eager's complex sigmoid equals `(1 + (-z).exp()).reciprocal()`
    in every one of 100,003 random elements, complex64 and complex128); the 1 is added as the complex
    number 1 + 0i, so an imaginary part of -0 becomes +0 as in eager."""
    re, im = rw.parts(value)
    grown_re, grown_im = rw.parts(_exp(rw, node, rw.complex_of(node, rw.neg(re), rw.neg(im))))
    return _div(rw, node, 1.0, rw.complex_of(node, rw.add(grown_re, 1.0), rw.add(grown_im, 0.0)))


_LOG_BASES = {aten.log2: math.log(2.0), aten.log10: math.log(10.0)}


@_rule(aten.log, aten.log2, aten.log10)
def _log(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """log z = log|z| + i arg z as glibc's clog takes it; log2 and log10 divide both parts by the base's
    log. Complex64 in float64 (|z| of two float32 parts overflows only in float32)."""
    re, im = rw.parts(value)
    angle = rw.emit(aten.atan2.default, im, re)
    if re.meta["val"].dtype == torch.float32:
        wide = [rw.emit(aten._to_copy.default, p, dtype=torch.float64, suffix="_f64") for p in (re, im)]
        magnitude = rw.emit(aten._to_copy.default, _log_magnitude(rw, *wide), dtype=torch.float32, suffix="_f32")
    else:
        magnitude = _log_magnitude(rw, re, im)
    base = _LOG_BASES.get(node.target.overloadpacket)
    if base is not None:
        magnitude, angle = rw.div(magnitude, base), rw.div(angle, base)
    return rw.complex_of(node, magnitude, angle)


_EPSILON = 2.0 ** -52  # float64's


def _log_magnitude(rw: _Rewrite, re: Node, im: Node) -> Node:
    """log|z| of float64 parts with glibc's care where |z| is near 1, where log(hypot(x, y)) keeps only
    the digits of |z| - 1 that survived rounding |z| (log1p(1.4e-6 + 0.007i) had a real part 4e-13 off,
    relative): with a the larger magnitude and b the smaller, log1p(b^2) / 2 where a is 1, and
    log1p(a^2 + b^2 - 1) / 2 for a in [1/2, 2) as glibc chooses, a^2 + b^2 - 1 summed without rounding
    error (two-products and two-sums) where it cancels. Elsewhere log|z|, as log(|z / 2|) + log 2 where
    |z| overflows with finite parts."""
    length = rw.emit(aten.hypot.default, re, im)
    halved = rw.add(rw.emit(aten.log.default, rw.emit(aten.hypot.default, rw.mul(re, 0.5), rw.mul(im, 0.5))),
                    math.log(2.0))
    finite = [rw.emit(aten.lt.Scalar, rw.emit(aten.abs.default, p), math.inf) for p in (re, im)]
    overflowed = rw.emit(aten.logical_and.default, rw.emit(aten.isinf.default, length),
                         rw.emit(aten.logical_and.default, *finite))
    result = rw.emit(aten.where.self, overflowed, halved, rw.emit(aten.log.default, length))

    def both(*conditions: Node) -> Node:
        out = conditions[0]
        for c in conditions[1:]:
            out = rw.emit(aten.logical_and.default, out, c)
        return out

    magnitudes = [rw.emit(aten.abs.default, p) for p in (re, im)]
    a, b = rw.emit(aten.maximum.default, *magnitudes), rw.emit(aten.minimum.default, *magnitudes)
    a_squared_minus_1 = rw.mul(rw.sub(a, 1.0), rw.add(a, 1.0))
    b_squared = rw.mul(b, b)
    half_log1p = lambda d: rw.mul(rw.emit(aten.log1p.default, d), 0.5)  # noqa: E731
    in_upper = both(rw.emit(aten.gt.Scalar, a, 1.0), rw.emit(aten.lt.Scalar, a, 2.0), rw.emit(aten.lt.Scalar, b, 1.0))
    upper = rw.add(a_squared_minus_1, rw.emit(aten.where.self, rw.emit(aten.ge.Scalar, b, _EPSILON), b_squared,
                                              rw.mul(b, 0.0)))
    below_one = both(rw.emit(aten.lt.Scalar, a, 1.0), rw.emit(aten.ge.Scalar, a, 0.5))
    b_negligible = rw.emit(aten.lt.Scalar, b, _EPSILON / 2)
    a_squared = rw.mul(a, a)
    cancels = rw.emit(aten.ge.Scalar, rw.add(a_squared, b_squared), 0.5)
    # The cases in glibc's order, the first that holds chosen: built from the last.
    result = rw.emit(aten.where.self, both(below_one, cancels), half_log1p(_sum_of_squares_minus_one(rw, a, b)),
                     result)
    result = rw.emit(aten.where.self, both(below_one, b_negligible), half_log1p(a_squared_minus_1), result)
    result = rw.emit(aten.where.self, in_upper, half_log1p(upper), result)
    return rw.emit(aten.where.self, rw.emit(aten.eq.Scalar, a, 1.0), half_log1p(b_squared), result)


def _sum_of_squares_minus_one(rw: _Rewrite, a: Node, b: Node) -> Node:
    """a^2 + b^2 - 1 for a in [1/2, 1), rounded once at the end: each square as its rounded value and
    the exact error (an FMA), the rounded parts added by two-sums, the small terms last. Exact steps
    only, which no pass of ours reorders (schedule/simplify.py) and no compiler contracts."""
    fma = torch.ops.fcompile.fused_multiply_add.default

    def two_product(x: Node) -> tuple[Node, Node]:
        high = rw.mul(x, x)
        return high, rw.emit(fma, x, x, rw.neg(high))

    def two_sum(x: Node, y: Any) -> tuple[Node, Node]:
        total = rw.add(x, y)
        y_part = rw.sub(total, x)
        return total, rw.add(rw.sub(x, rw.sub(total, y_part)), rw.sub(y, y_part))

    a_high, a_low = two_product(a)
    b_high, b_low = two_product(b)
    first, first_error = two_sum(a_high, -1.0)
    second, second_error = two_sum(first, b_high)
    return rw.add(second, rw.add(rw.add(first_error, second_error), rw.add(a_low, b_low)))


@_rule(aten.atanh, aten.atan)
def _atanh(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """atanh as glibc's catanh takes it (eager's CPU kernel calls it; complex128 bit for bit on 3,400
    edge and random values, checked against eager before writing this), in float64 for complex64;
    atan(z) = -i atanh(iz), the parts swapped (eager's complex atan is within 1e-14 of this)."""
    re, im = rw.parts(value)
    atan = node.target.overloadpacket is aten.atan
    if atan:
        re, im = rw.neg(im), re
    # C's zero with the real part's sign, a NaN's sign bit included (catanh(-nan + inf i) is -0 + pi/2 i),
    # taken before widening: the GPU's float32 -> float64 conversion makes every NaN positive.
    signed_zero = rw.emit(aten.copysign.Tensor, rw.emit(aten.full_like.default, re, 0.0), re)
    narrow = re.meta["val"].dtype == torch.float32
    if narrow:
        re, im, signed_zero = (rw.emit(aten._to_copy.default, p, dtype=torch.float64, suffix="_f64")
                               for p in (re, im, signed_zero))
    out_re, out_im = _atanh_parts(rw, re, im, signed_zero)
    if atan:
        out_re, out_im = out_im, rw.neg(out_re)
    if narrow:
        out_re, out_im = (rw.emit(aten._to_copy.default, p, dtype=torch.float32, suffix="_f32")
                          for p in (out_re, out_im))
    return rw.complex_of(node, out_re, out_im)


def _atanh_parts(rw: _Rewrite, re: Node, im: Node, zero_like_re: Node) -> tuple[Node, Node]:
    """catanh's cases, the first that holds chosen (built from the last): an infinite or NaN part (C's
    Annex G), zero, a part past 16 / epsilon (1 / x and the like, the imaginary part +-pi/2), and
    otherwise 1/4 log(((1 + x)^2 + y^2) / ((1 - x)^2 + y^2)) (through log1p where that ratio is near 1,
    glibc's ln 2 - log|y| form for |x| = 1 and a tiny y) and 1/2 atan2(2y, 1 - x^2 - y^2) with that
    denominator summed without cancellation near the unit circle."""
    emit, where = rw.emit, (lambda c, a, b: rw.emit(aten.where.self, c, a, b))
    both = lambda c, d: emit(aten.logical_and.default, c, d)  # noqa: E731
    either = lambda c, d: emit(aten.logical_or.default, c, d)  # noqa: E731
    abs_re, abs_im = emit(aten.abs.default, re), emit(aten.abs.default, im)
    filled = lambda number: emit(aten.full_like.default, re, number)  # noqa: E731
    quarter_turn = emit(aten.copysign.Tensor, filled(math.pi / 2), im)

    # general
    unit = both(emit(aten.eq.Scalar, abs_re, 1.0), emit(aten.lt.Scalar, abs_im, _EPSILON ** 2))
    unit_re = rw.mul(emit(aten.copysign.Tensor, filled(0.5), re),
                     rw.sub(math.log(2.0), emit(aten.log.default, abs_im)))
    im_squared = where(emit(aten.ge.Scalar, abs_im, _EPSILON ** 2), rw.mul(im, im), rw.mul(im, 0.0))
    plus, minus = rw.add(re, 1.0), rw.sub(1.0, re)
    num, den = rw.add(im_squared, rw.mul(plus, plus)), rw.add(im_squared, rw.mul(minus, minus))
    ratio = rw.div(num, den)
    ratio_re = where(emit(aten.lt.Scalar, ratio, 0.5), rw.mul(emit(aten.log.default, ratio), 0.25),
                     rw.mul(emit(aten.log1p.default, rw.div(rw.mul(re, 4.0), den)), 0.25))
    general_re = where(unit, unit_re, ratio_re)
    a, b = emit(aten.maximum.default, abs_re, abs_im), emit(aten.minimum.default, abs_re, abs_im)
    one_minus_a_squared = rw.mul(rw.sub(1.0, a), rw.add(a, 1.0))
    plain = rw.sub(one_minus_a_squared, rw.mul(b, b))
    careful = where(either(emit(aten.ge.Scalar, a, 0.75), emit(aten.ge.Scalar, b, 0.5)),
                    rw.neg(_sum_of_squares_minus_one(rw, a, b)), plain)
    denominator = where(emit(aten.ge.Scalar, a, 1.0), plain, careful)
    tiny_b = where(emit(aten.eq.Scalar, one_minus_a_squared, 0.0), rw.mul(a, 0.0), one_minus_a_squared)  # +0
    denominator = where(emit(aten.lt.Scalar, b, _EPSILON / 2), tiny_b, denominator)
    general_im = rw.mul(emit(aten.atan2.default, rw.mul(im, 2.0), denominator), 0.5)

    # a part past 16 / epsilon
    huge = either(emit(aten.ge.Scalar, abs_re, 16 / _EPSILON), emit(aten.ge.Scalar, abs_im, 16 / _EPSILON))
    half_length = emit(aten.hypot.default, rw.mul(re, 0.5), rw.mul(im, 0.5))
    huge_re = where(emit(aten.le.Scalar, abs_im, 1.0), emit(aten.reciprocal.default, re),
                    where(emit(aten.le.Scalar, abs_re, 1.0), rw.div(rw.div(re, im), im),
                          rw.div(rw.div(rw.div(re, half_length), half_length), 4.0)))
    out_re = where(huge, huge_re, general_re)
    out_im = where(huge, quarter_turn, general_im)

    # zero, then the infinite and NaN parts
    zero = both(emit(aten.eq.Scalar, re, 0.0), emit(aten.eq.Scalar, im, 0.0))
    out_re, out_im = where(zero, re, out_re), where(zero, im, out_im)
    re_inf, im_inf = emit(aten.isinf.default, re), emit(aten.isinf.default, im)
    re_nan, im_nan = emit(aten.isnan.default, re), emit(aten.isnan.default, im)
    nonfinite = either(either(re_inf, im_inf), either(re_nan, im_nan))
    nan = filled(math.nan)
    axis = either(re_inf, emit(aten.eq.Scalar, re, 0.0))  # re infinite or zero: 0 with its sign
    special_re = where(either(im_inf, axis), zero_like_re, nan)
    special_im = where(either(im_inf, both(axis, emit(aten.logical_not.default, im_nan))), quarter_turn, nan)
    return where(nonfinite, special_re, out_re), where(nonfinite, special_im, out_im)


@_rule(aten.log1p)
def _log1p(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """log(1 + z) as ATen's CPU kernel takes it (c10's complex log1p, after numpy's): with u = z + 1, z
    itself where u is exactly 1, log u where u - 1 gives z back, else log u * (z / (u - 1)), which puts
    back the digits of z that z + 1 rounded away. (Eager's CUDA kernel uses another formula, within a
    few ulp of this one.)"""
    re, im = rw.parts(value)
    shifted = rw.add(re, 1.0)
    log_u = _log(rw, node, rw.complex_of(node, shifted, im))
    back = rw.sub(shifted, 1.0)
    scaled = _mul(rw, node, log_u, _div(rw, node, value, rw.complex_of(node, back, im)))
    one = rw.emit(aten.logical_and.default, rw.emit(aten.eq.Scalar, shifted, 1.0), rw.emit(aten.eq.Scalar, im, 0.0))
    exact = rw.emit(aten.logical_and.default, rw.emit(aten.eq.Tensor, back, re), rw.emit(aten.eq.Tensor, im, im))
    parts = []
    for z_part, log_part, scaled_part in zip((re, im), rw.parts(log_u), rw.parts(scaled)):
        parts.append(rw.emit(aten.where.self, one, z_part, rw.emit(aten.where.self, exact, log_part, scaled_part)))
    return rw.complex_of(node, *parts)


@_rule(aten.expm1)
def _expm1(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """exp(z) - 1 as c10 computes it for both devices: (expm1(x) cos y - 2 sin(y/2)^2, exp(x) sin y), in
    the parts' own dtype (the formula's NaN where exp(x) is infinite and sin y zero is eager's too)."""
    re, im = rw.parts(value)
    half_sine = rw.emit(aten.sin.default, rw.mul(im, 0.5))
    out_re = rw.sub(rw.mul(rw.emit(aten.expm1.default, re), rw.emit(aten.cos.default, im)),
                    rw.mul(rw.mul(half_sine, 2.0), half_sine))
    out_im = rw.mul(rw.emit(aten.exp.default, re), rw.emit(aten.sin.default, im))
    return rw.complex_of(node, out_re, out_im)


@_rule(aten.sqrt, aten.rsqrt)
def _sqrt(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    root = _sqrt_of(rw, node, value)
    if node.target.overloadpacket is aten.rsqrt:
        return _div(rw, node, 1.0, root)
    return root


def _sqrt_of(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """The principal square root as C's csqrt takes it: with t = sqrt((|x| + |z|) / 2), (t, y / 2t) for
    x >= 0 and (|y| / 2t, t with y's sign) for x < 0, so the branch cut along the negative axis keeps
    the sign of a zero imaginary part; z = 0 gives (0, y) and an infinite y gives (inf, y). t is
    computed as sqrt(|x| / 2 + |z| / 2) (no overflow), in float64 for complex64. rsqrt is 1 / sqrt."""
    re, im = rw.parts(value)
    dtype = re.meta["val"].dtype
    if dtype == torch.float32:
        re, im = (rw.emit(aten._to_copy.default, p, dtype=torch.float64, suffix="_f64") for p in (re, im))
    half_sum = rw.add(rw.mul(rw.emit(aten.abs.default, re), 0.5), rw.mul(rw.emit(aten.hypot.default, re, im), 0.5))
    t = rw.emit(aten.sqrt.default, half_sum)
    twice = rw.mul(t, 2.0)
    negative = rw.emit(aten.lt.Scalar, re, 0)
    zero = rw.emit(aten.eq.Scalar, t, 0)
    infinite = rw.emit(aten.isinf.default, im)
    other = rw.div(im, twice)
    out_re = rw.emit(aten.where.self, negative, rw.div(rw.emit(aten.abs.default, im), twice), t)
    out_im = rw.emit(aten.where.self, negative, rw.emit(aten.copysign.Tensor, t, im), other)
    out_re = rw.emit(aten.where.self, zero, rw.mul(im, 0.0), out_re)  # +0 (or NaN for a NaN y)
    out_re = rw.emit(aten.where.self, zero, rw.emit(aten.abs.default, out_re), out_re)
    out_im = rw.emit(aten.where.self, zero, im, out_im)
    out_re = rw.emit(aten.where.self, infinite, rw.emit(aten.abs.default, im), out_re)
    out_im = rw.emit(aten.where.self, infinite, im, out_im)
    return rw.complex_of(node, out_re, out_im)


def _scaled_product(rw: _Rewrite, a: Node, factor: Node, odd: bool) -> Node:
    """cosh(a) * factor (odd: sinh(a) * factor) without overflowing where the product is finite: past
    |a| = 20, cosh and |sinh| are exp(|a|) / 2 to float64's precision, so the product is
    exp(|a| + log|factor| - log 2) with factor's sign (and a's for sinh), as C's csinh scales it."""
    naive = rw.mul(rw.emit(aten.sinh.default if odd else aten.cosh.default, a), factor)
    magnitude = rw.emit(aten.exp.default, rw.add(rw.add(rw.emit(aten.abs.default, a), rw.emit(
        aten.log.default, rw.emit(aten.abs.default, factor))), -math.log(2.0)))
    scaled = rw.mul(magnitude, rw.emit(aten.sign.default, factor))
    if odd:
        scaled = rw.mul(scaled, rw.emit(aten.sign.default, a))
    big = rw.emit(aten.gt.Scalar, rw.emit(aten.abs.default, a), 20.0)
    return rw.emit(aten.where.self, big, scaled, naive)


def _sinh_cosh(rw: _Rewrite, re: Node, im: Node, odd: bool, unbounded: float = math.inf) -> tuple[Node, Node]:
    """sinh (odd) or cosh of re + i im, in float64, with C's values where a part is zero, infinite or
    NaN (Annex G of the C standard: csinh(x + i0) keeps the zero, csinh(+-inf + i inf) is (inf, NaN)).
    `unbounded`: the real part for an infinite re and an infinite or NaN im, whose sign C leaves to
    the library: glibc gives +inf for csinh and ccosh, and csin's imaginary part +inf (-inf here)."""
    cos_im, sin_im = rw.emit(aten.cos.default, im), rw.emit(aten.sin.default, im)
    out_re = _scaled_product(rw, re, cos_im, odd)
    out_im = _scaled_product(rw, re, sin_im, not odd)
    zero_im = rw.emit(aten.eq.Scalar, im, 0)
    out_im = rw.emit(aten.where.self, zero_im, im, out_im)  # sinh/cosh(x + i0) = (sinh/cosh x, 0)
    not_finite_im = rw.emit(aten.logical_not.default, rw.emit(aten.lt.Scalar, rw.emit(aten.abs.default, im), math.inf))
    zero_re = rw.emit(aten.logical_and.default, rw.emit(aten.eq.Scalar, re, 0), not_finite_im)
    nan = rw.sub(im, im)  # NaN where im is infinite or NaN
    if odd:  # csinh(+-0 + i inf or NaN) = (+-0, NaN)
        out_re = rw.emit(aten.where.self, zero_re, re, out_re)
    else:  # ccosh(+-0 + i inf or NaN) = (NaN, +-0)
        out_im = rw.emit(aten.where.self, zero_re, re, out_im)
    infinite_re = rw.emit(aten.logical_and.default, rw.emit(aten.isinf.default, re), not_finite_im)
    out_re = rw.emit(aten.where.self, infinite_re, rw.emit(aten.full_like.default, re, unbounded), out_re)
    out_im = rw.emit(aten.where.self, infinite_re, nan, out_im)
    return out_re, out_im


@_rule(aten.sinh, aten.cosh, aten.sin, aten.cos)
def _hyperbolic(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """csinh and ccosh; csin(z) = -i csinh(iz) and ccos(z) = ccosh(iz), as C defines them. Complex64 is
    computed in float64 (cosh of a float32 part overflows float32 where the product may not)."""
    re, im = rw.parts(value)
    if re.meta["val"].dtype == torch.float32:
        re, im = (rw.emit(aten._to_copy.default, p, dtype=torch.float64, suffix="_f64") for p in (re, im))
    kind = node.target.overloadpacket
    if kind in (aten.sinh, aten.cosh):
        return rw.complex_of(node, *_sinh_cosh(rw, re, im, odd=kind is aten.sinh))
    rotated_re, rotated_im = _sinh_cosh(rw, rw.neg(im), re, odd=kind is aten.sin,  # of i z = (-im, re)
                                        unbounded=-math.inf if kind is aten.sin else math.inf)
    if kind is aten.sin:  # -i (x + i y) = (y, -x)
        return rw.complex_of(node, rotated_im, rw.neg(rotated_re))
    return rw.complex_of(node, rotated_re, rotated_im)


def _tanh_parts(rw: _Rewrite, re: Node, im: Node) -> tuple[Node, Node]:
    """ctanh of re + i im in float64, as glibc computes it: (sinh x cosh x, sin y cos y) / (sinh^2 x +
    cos^2 y), and past |x| = 20 (tanh x is +-1 to float64's precision) (+-1, 4 sin y cos y e^(-2|x|)),
    which neither overflows nor loses the tiny imaginary part. Infinite x gives (+-1, a zero with the
    sign of sin y cos y, or of y where |y| <= 1 or y is not finite); NaN x with y = 0 gives (NaN, y);
    a finite x with y infinite or NaN gives (x, NaN) for a zero x, else (NaN, NaN)."""
    sin_im, cos_im = rw.emit(aten.sin.default, im), rw.emit(aten.cos.default, im)
    sinh_re, cosh_re = rw.emit(aten.sinh.default, re), rw.emit(aten.cosh.default, re)
    denominator = rw.add(rw.mul(sinh_re, sinh_re), rw.mul(cos_im, cos_im))
    near_re = rw.div(rw.mul(sinh_re, cosh_re), denominator)
    near_im = rw.div(rw.mul(sin_im, cos_im), denominator)
    abs_re = rw.emit(aten.abs.default, re)
    one = rw.emit(aten.sign.default, re)
    far_im = rw.mul(rw.mul(rw.mul(sin_im, cos_im), 4.0), rw.emit(aten.exp.default, rw.mul(abs_re, -2.0)))
    far = rw.emit(aten.gt.Scalar, abs_re, 20.0)
    out_re = rw.emit(aten.where.self, far, one, near_re)
    out_im = rw.emit(aten.where.self, far, far_im, near_im)
    # x infinite: (+-1, +-0); the zero's sign from sin y cos y where y is finite and |y| > 1, else y's
    abs_im = rw.emit(aten.abs.default, im)
    from_product = rw.emit(aten.logical_and.default, rw.emit(aten.gt.Scalar, abs_im, 1.0),
                           rw.emit(aten.lt.Scalar, abs_im, math.inf))
    zero = rw.emit(aten.copysign.Tensor, rw.emit(aten.full_like.default, re, 0.0),
                   rw.emit(aten.where.self, from_product, rw.mul(sin_im, cos_im), im))
    infinite_re = rw.emit(aten.isinf.default, re)
    out_re = rw.emit(aten.where.self, infinite_re, one, out_re)
    out_im = rw.emit(aten.where.self, infinite_re, zero, out_im)
    nan_re_zero_im = rw.emit(aten.logical_and.default, rw.emit(aten.isnan.default, re), rw.emit(aten.eq.Scalar, im, 0))
    out_im = rw.emit(aten.where.self, nan_re_zero_im, im, out_im)
    # finite x, y infinite or NaN: (x, NaN) for a zero x, else (NaN, NaN)
    lost = rw.emit(aten.logical_and.default, rw.emit(aten.lt.Scalar, abs_re, math.inf),
                   rw.emit(aten.logical_not.default, rw.emit(aten.lt.Scalar, abs_im, math.inf)))
    nan = rw.sub(im, im)
    out_re = rw.emit(aten.where.self, lost, rw.emit(aten.where.self, rw.emit(aten.eq.Scalar, re, 0), re, nan), out_re)
    out_im = rw.emit(aten.where.self, lost, nan, out_im)
    return out_re, out_im


@_rule(aten.tanh, aten.tan)
def _tanh(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    """ctanh; ctan(z) = -i ctanh(iz). Complex64 in float64."""
    re, im = rw.parts(value)
    if re.meta["val"].dtype == torch.float32:
        re, im = (rw.emit(aten._to_copy.default, p, dtype=torch.float64, suffix="_f64") for p in (re, im))
    if node.target.overloadpacket is aten.tanh:
        return rw.complex_of(node, *_tanh_parts(rw, re, im))
    rotated_re, rotated_im = _tanh_parts(rw, rw.neg(im), re)  # of i z = (-im, re)
    return rw.complex_of(node, rotated_im, rw.neg(rotated_re))  # -i (x + i y) = (y, -x)


@_rule(aten.pow)
def _pow(rw: _Rewrite, node: Node, base: Operand, exponent: Operand) -> _Complex:
    """z ** w as eager computes it: glibc's cpow, exp(w log z), element by element, and for a real
    scalar exponent ATen's shortcuts first: 0 gives 1, 1 the base, 2 and 3 products, -1 and -2
    reciprocals (of z and z*z), 0.5 and -0.5 sqrt and rsqrt. A number base is made a tensor."""
    if not isinstance(base, _Complex) and not isinstance(base, Node):  # pow.Scalar: a number ** a tensor
        if complex(base) == 0:
            raise NotRealPairs("zero ** a complex tensor (C's cpow of a zero base)")
        logarithm = cmath.log(complex(base))  # C's clog, for a finite nonzero number
        return _exp(rw, node, _c_product(rw, node, exponent, logarithm))
    if isinstance(exponent, complex) and exponent.imag == 0:  # ATen compares the scalar's value
        exponent = exponent.real
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        if exponent == 0:
            return rw.complex_of(node, 1.0, 0.0)
        if exponent == 1:
            return _identity(rw, node, base)
        if exponent in (2, 3, -2):
            square = _mul(rw, node, base, base)
            power = _mul(rw, node, square, base) if exponent == 3 else square
            return _div(rw, node, 1.0, power) if exponent < 0 else power
        if exponent == -1:
            return _div(rw, node, 1.0, base)
        if exponent in (0.5, -0.5):
            root = _sqrt_of(rw, node, base)
            return _div(rw, node, 1.0, root) if exponent < 0 else root
    logarithm = _log(rw, node, base)
    return _exp(rw, node, _c_product(rw, node, exponent, logarithm))


def _c_product(rw: _Rewrite, node: Node, a: Operand, b: Operand) -> _Complex:
    """a * b as C multiplies complex numbers (GCC's __mulsc3, Annex G), which glibc's cpow uses for
    w * log z: the plain product, and where both of its parts are NaN but an operand or a partial
    product is infinite, the infinity recovered (each infinite part boxed to +-1, NaN parts to +-0, the
    product taken again and scaled by inf). A real exponent counts as complex with a zero imaginary
    part (0 * inf is NaN there, as in C). aten.mul stays the plain product: eager's vectorized one.
    A number operand (a scalar exponent) is boxed here, in Python."""
    ar, ai = rw.lazy_parts(a)
    ai = 0.0 if ai is None else ai
    br, bi = rw.lazy_parts(b)
    bi = 0.0 if bi is None else bi
    like = next(t for t in (br, bi, ar, ai) if isinstance(t, Node))
    ac, bd, ad, bc = rw.mul(ar, br), rw.mul(ai, bi), rw.mul(ar, bi), rw.mul(ai, br)
    x, y = rw.sub(ac, bd), rw.add(ad, bc)

    def isinf(t: Any) -> Any:
        return math.isinf(t) if not isinstance(t, Node) else rw.emit(aten.isinf.default, t)

    def isnan(t: Node) -> Node:
        return rw.emit(aten.isnan.default, t)

    def either(p: Any, q: Any) -> Any:
        if not isinstance(p, Node) and not isinstance(q, Node):
            return p or q
        if not isinstance(p, Node) or not isinstance(q, Node):
            flag, tensor = (p, q) if not isinstance(p, Node) else (q, p)
            return tensor if not flag else True
        return rw.emit(aten.logical_or.default, p, q)

    def where(c: Any, p: Any, q: Any) -> Any:
        if not isinstance(c, Node):
            return p if c else q
        return rw.emit(aten.where.self, c, rw.tensor_like(p, like), rw.tensor_like(q, like))

    def boxed(t: Any) -> Any:  # +-1 for an infinite part, else +-0 (its sign kept)
        if not isinstance(t, Node):
            return math.copysign(1.0 if math.isinf(t) else 0.0, t)
        return rw.emit(aten.copysign.Tensor, where(isinf(t), rw.emit(aten.full_like.default, t, 1.0),
                                                   rw.emit(aten.full_like.default, t, 0.0)), t)

    def unnan(t: Any) -> Any:  # +-0 for NaN
        if not isinstance(t, Node):
            return math.copysign(0.0, t) if math.isnan(t) else t
        return where(isnan(t), rw.emit(aten.copysign.Tensor, rw.emit(aten.full_like.default, t, 0.0), t), t)

    a_inf, b_inf = either(isinf(ar), isinf(ai)), either(isinf(br), isinf(bi))
    ar2, ai2 = where(a_inf, boxed(ar), ar), where(a_inf, boxed(ai), ai)
    br2, bi2 = where(a_inf, unnan(br), br), where(a_inf, unnan(bi), bi)
    br2, bi2 = where(b_inf, boxed(br2), br2), where(b_inf, boxed(bi2), bi2)
    ar2, ai2 = where(b_inf, unnan(ar2), ar2), where(b_inf, unnan(ai2), ai2)
    partial_inf = either(either(isinf(ac), isinf(bd)), either(isinf(ad), isinf(bc)))
    no_operand_inf = either(a_inf, b_inf)
    no_operand_inf = (not no_operand_inf) if not isinstance(no_operand_inf, Node) else \
        rw.emit(aten.logical_not.default, no_operand_inf)
    only_partial = partial_inf if no_operand_inf is True else False if no_operand_inf is False else \
        rw.emit(aten.logical_and.default, partial_inf, no_operand_inf)
    ar2, ai2, br2, bi2 = (where(only_partial, unnan(t), t) for t in (ar2, ai2, br2, bi2))
    both_nan = rw.emit(aten.logical_and.default, isnan(x), isnan(y))
    cause = either(either(a_inf, b_inf), partial_inf)
    recalc = both_nan if cause is True else rw.emit(aten.logical_and.default, both_nan, cause)
    x2 = rw.mul(rw.sub(rw.mul(ar2, br2), rw.mul(ai2, bi2)), math.inf)
    y2 = rw.mul(rw.add(rw.mul(ar2, bi2), rw.mul(ai2, br2)), math.inf)
    return rw.complex_of(node, where(recalc, x2, x), where(recalc, y2, y))
