"""lgamma and digamma as pointwise expressions of our primitives (log, exp, sin, tan, divisions), so
both backends compute them from one definition and they fuse with their neighbours; mvlgamma and
polygamma(0, x) follow through torch's references, polygamma(1, x) is trigamma below.

- lgamma, for x >= 0.5: Lanczos' approximation (g = 7, 9 terms; relative error ~1e-15, so float32
  keeps all its digits but for the rounding of the sum); below, the reflection
  lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x), with sin(pi x) taken of x - round(x), which is
  exact, so the poles (0, -1, -2...) give +inf as eager's lgamma does.
- digamma: psi(x) = psi(x + 6) - sum_{k<6} 1/(x + k), with psi(y) for y >= 6 from its asymptotic
  series (error below 1e-11); for x < 0 the reflection psi(x) = psi(1 - x) - pi / tan(pi x).
  Eager's values at the special points: -inf at +0, +inf at -0, NaN at the negative integers.
- polygamma(1, x), trigamma: the same shift by 6 with trigamma's asymptotic series, and the
  reflection psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x) below 0.5.
Half-precision inputs are computed in float32 and rounded once, as eager's opmath does.
angle of a real number (pi below zero, else 0, NaN kept) is here too.
"""

from __future__ import annotations

import math

import torch
import torch._refs.special as refs_special

aten = torch.ops.aten

_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)
# psi(y) ~ log y - 1/(2y) - sum_k B_2k / (2k y^2k): the B_2k / 2k for k = 1..6
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760)


def _opmath(x: torch.Tensor) -> torch.Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _lgamma_right(x: torch.Tensor) -> torch.Tensor:
    """lgamma for x >= 0.5 (Lanczos)."""
    z = x - 1
    total = torch.full_like(z, _LANCZOS[0])
    for k, c in enumerate(_LANCZOS[1:], 1):
        total = total + c / (z + k)
    t = z + (_LANCZOS_G + 0.5)
    return 0.5 * math.log(2 * math.pi) + (z + 0.5) * torch.log(t) - t + torch.log(total)


def _sin_pi(x: torch.Tensor) -> torch.Tensor:
    """|sin(pi x)|, exact in its argument: pi times the distance to the nearest integer."""
    return torch.sin(math.pi * (x - torch.round(x))).abs()


def lgamma(x: torch.Tensor) -> torch.Tensor:
    if not x.is_floating_point():
        return NotImplemented
    v = _opmath(x)
    right = _lgamma_right(torch.where(v < 0.5, 1 - v, v))  # the mirror point for the left side
    left = math.log(math.pi) - torch.log(_sin_pi(v)) - right
    out = torch.where(v < 0.5, left, right)
    out = torch.where(v.abs() == float("inf"), float("inf"), out)  # lgamma(+-inf) = +inf
    return out.to(x.dtype)


def _digamma_right(x: torch.Tensor) -> torch.Tensor:
    """psi for x > 0 (and 1 - x for the reflected left side)."""
    y = x + 6
    inverse_square = 1 / (y * y)
    series = torch.zeros_like(y)
    for c in reversed(_DIGAMMA_SERIES):
        series = (series + c) * inverse_square
    shifted = torch.log(y) - 0.5 / y - series
    for k in range(6):
        shifted = shifted - 1 / (x + k)
    return shifted


def digamma(x: torch.Tensor) -> torch.Tensor:
    if not x.is_floating_point():
        return NotImplemented
    v = _opmath(x)
    negative = v < 0
    right = _digamma_right(torch.where(negative, 1 - v, v))
    reduced = v - torch.round(v)  # tan has period pi: tan(pi x) = tan(pi (x - round x)), exactly
    left = right - math.pi / torch.tan(math.pi * reduced)
    out = torch.where(negative, left, right)
    out = torch.where(negative & (reduced == 0), float("nan"), out)  # the poles at -1, -2, ...
    # at 0: -inf for +0 and +inf for -0, eager's copysign(inf, -x)
    out = torch.where(v == 0, torch.where(torch.signbit(v), float("inf"), float("-inf")), out)
    out = torch.where(v == float("inf"), float("inf"), out)
    return out.to(x.dtype)


def trigamma(x: torch.Tensor) -> torch.Tensor:
    """psi'(x) = sum_{k<6} 1/(x+k)^2 + its asymptotic series at y = x + 6; below 0.5 the reflection
    psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x), with sin(pi x) of the unreduced product as eager takes
    it, so its poles come out as eager's (+inf at 0, about 1e15 at the negative integers in float32)."""
    v = _opmath(x)
    left = v < 0.5
    y = torch.where(left, 1 - v, v)
    total = torch.zeros_like(y)
    for k in range(6):
        total = total + 1 / ((y + k) * (y + k))
    z = y + 6
    inverse_square = 1 / (z * z)
    series = 1 / 6 - inverse_square * (1 / 30 - inverse_square * (1 / 42))
    total = total + (1 + 1 / (2 * z) + inverse_square * series) / z
    sin_pi = torch.sin(math.pi * v)
    out = torch.where(left, math.pi ** 2 / (sin_pi * sin_pi) - total, total)
    return out.to(x.dtype)


# Bernoulli numbers B_2, B_4, ..., B_16: the Euler-Maclaurin tail of a Hurwitz zeta sum.
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510)
_ZETA_SHIFT = 9


def _hurwitz_zeta_right(s: int | torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """zeta(s, q) = sum_k (q + k)^-s for an integer s >= 2 (or a float64 tensor of real s > 1) and q > 0:
    the first nine terms summed, the rest by Euler-Maclaurin at a = q + 9 (the integral, half the first
    term, then B_2j terms falling like ((s + 2j) / (2 pi a))^2j: below float64's rounding after B_16 for
    moderate s; for large s the leading terms dominate them)."""
    total = torch.zeros_like(q)
    for k in range(_ZETA_SHIFT):
        total = total + torch.pow(q + k, -s)
    a = q + _ZETA_SHIFT
    total = total + torch.pow(a, 1 - s) / (s - 1) + 0.5 * torch.pow(a, -s)
    rising = s if isinstance(s, torch.Tensor) else float(s)  # s (s + 1) ... (s + 2j - 2)
    for j, bernoulli in enumerate(_BERNOULLI, 1):
        total = total + (bernoulli / math.factorial(2 * j) * rising) * torch.pow(a, -s - 2 * j + 1)
        rising = rising * ((s + 2 * j - 1) * (s + 2 * j))
    return total


def _cot_pi_derivative(n: int, x: torch.Tensor) -> torch.Tensor:
    """d^n/dx^n cot(pi x) for n = 1..4, as polynomials in c = cot(pi x) (c' = -pi (1 + c^2)); cot taken
    of x - round(x), which is exact."""
    reduced = x - torch.round(x)
    c = 1 / torch.tan(math.pi * reduced)
    u = 1 + c * c
    pi = math.pi
    return (-pi * u, 2 * pi ** 2 * c * u, -2 * pi ** 3 * u * (1 + 3 * c * c),
            8 * pi ** 4 * c * u * (2 + 3 * c * c))[n - 1]


def _polygamma_high(n: int, x: torch.Tensor) -> torch.Tensor:
    """psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for x > 0; below 0 the reflection
    psi^(n)(x) = (-1)^n psi^(n)(1 - x) - pi d^n/dx^n cot(pi x). At 0 and the negative integers eager's
    zeta is +inf, so the result is an infinity of psi^(n)'s sign there; at +inf it is NaN, as eager's.
    Computed in float64: cot(pi x) near its zeros is off by float32's rounding of pi/2, and
    d^4/dx^4 cot multiplies that by 8 pi^4 (an error of 3e-3 relative at x = -2.5 in float32)."""
    v = x.to(torch.float64)
    negative = v < 0
    y = torch.where(negative, 1 - v, v)
    sign = -1.0 if n % 2 == 0 else 1.0  # (-1)^(n+1)
    right = (sign * math.factorial(n)) * _hurwitz_zeta_right(n + 1, y)
    left = (-sign) * right - math.pi * _cot_pi_derivative(n, v)
    out = torch.where(negative, left, right)
    pole = (v <= 0) & (v == torch.round(v))
    out = torch.where(pole, sign * float("inf"), out)
    out = torch.where(v == float("inf"), float("nan"), out)
    return out.to(x.dtype)


def polygamma(n: int, x: torch.Tensor) -> torch.Tensor:
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())  # integers and bools: eager computes in the default dtype
    if n == 0:
        return digamma(x)
    if n == 1:
        return trigamma(x)
    return _polygamma_high(n, x) if n <= 4 else NotImplemented


def angle(x: torch.Tensor) -> torch.Tensor:
    if x.is_complex():
        return NotImplemented
    v = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    return torch.where(torch.isnan(v), v, torch.where(v < 0, math.pi, 0.0)).to(v.dtype)


def frexp(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x = mantissa * 2^exponent with |mantissa| in [0.5, 1): the exponent from log2, corrected once either
    way where log2 rounded across a power of two; in float64, where dividing by 2^e is exact for every
    float32 (subnormals included). Zeros, infinities and NaN: mantissa x, exponent 0, as eager's."""
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return NotImplemented  # float64's own range would overflow 2^e at the top
    v = x.to(torch.float64)
    a = v.abs()
    regular = (a > 0) & (a < float("inf"))
    e = torch.floor(torch.log2(torch.where(regular, a, 1.0))) + 1
    m = v / torch.exp2(e)
    high = m.abs() >= 1
    e, m = torch.where(high, e + 1, e), torch.where(high, m / 2, m)
    low = m.abs() < 0.5
    e, m = torch.where(low, e - 1, e), torch.where(low, m * 2, m)
    mantissa = torch.where(regular, m, v).to(x.dtype)
    return mantissa, torch.where(regular, e, 0.0).to(torch.int32)


def spherical_bessel_j0(x: torch.Tensor) -> torch.Tensor:
    """sin(x) / x; below |x| = 0.5 its Taylor series (to x^12, as eager sums it), 0 at the infinities."""
    v = x if x.is_floating_point() else x.to(torch.get_default_dtype())
    w = _opmath(v)
    square = w * w
    series = torch.zeros_like(w)
    for k in (6, 5, 4, 3, 2, 1):  # 1 - x^2/3! + x^4/5! - ...: coefficient (-1)^k / (2k+1)!
        series = (series + (-1) ** k / math.factorial(2 * k + 1)) * square
    out = torch.where(w.abs() < 0.5, 1 + series, torch.sin(w) / w)
    out = torch.where(w.abs() == float("inf"), 0.0, out)
    return out.to(v.dtype)


SPECIAL = {aten.angle.default: angle, aten.frexp.Tensor: frexp, aten.lgamma.default: lgamma,
           aten.digamma.default: digamma,
           aten.polygamma.default: polygamma, aten.special_polygamma.default: polygamma,
           aten.mvlgamma.default: lambda x, p: refs_special.multigammaln(x, p),
           aten.special_spherical_bessel_j0.default: spherical_bessel_j0}
