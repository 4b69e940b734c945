"""Special functions computed in float64 from their definitions and rounded once to the result's dtype:
erfcx, log_ndtr, ndtri, erfinv (the error-function family), Hurwitz zeta and nextafter.

- The error-function family rests on the erfc primitive, accurate in relative terms in its tail on both
  backends (C++'s std::erfc; in the Triton interpreter, codegen/triton/kernel.py's _erfc), and past
  x = 26, before erfc(x) leaves float64's normal range, on erfcx's asymptotic series
  (1 - u + 3u^2 - 15u^3 ...) / (sqrt(pi) x), u = 1 / (2x^2).
- erfcx(x) = exp(x^2) erfc(x), exp(x^2) without x^2's rounding (Dekker's exact square); below -26.7
  it overflows to inf, as eager's.
- log_ndtr(x), t = x / sqrt(2): below 0 log(erfc(-t) / 2) (its series form past 26); above,
  log1p(-erfc(t) / 2) with log1p written out (log(w) u / (w - 1), w = 1 + u), as the Triton
  interpreter's log1p is log(1 + u).
- erfinv(y), and ndtri(p) = sqrt(2) erfinv(2p - 1): for |y| <= 0.9, Halley's step on erf(x) = y from a
  fitted polynomial; beyond, Halley's step on log(erfc(x)) = log(r) from a fitted start, with
  r = 1 - |y| (erfinv) or 2p, 2(1 - p) (ndtri), each exact, so the tails keep their relative accuracy
  down to the smallest subnormal. The fits come from scripts/special_float64_coefficients.py (mpmath).
- zeta(x, q): the Euler-Maclaurin sum of special.py for q > 0; for q < 0 (integer x only; eager gives NaN
  otherwise) the terms with q + k < 0 folded over to positive arguments, with f = frac(-q):
  zeta(x, q) = (-1)^x (zeta(x, f) - zeta(x, 1 - q)) + zeta(x, 1 - f). Eager's special values are kept,
  down to its NaN for q > 1 once x >= 2.5e13 (its own series overflows there).
- nextafter(x, y) is exact: x +- delta with delta strictly between 1/2 and 3/2 of the gap to the
  neighbour, rounded once to the nearest value of the dtype, which is the neighbour. For float32, float16
  and bfloat16 the sum is exact in float64 and the cast rounds; float64 rounds the sum itself, scaled by
  2^200 near the subnormals so that delta stays exact.
Integer and bool inputs compute in the default dtype, as eager does; eager's missing dtypes (half
precision for all but erfinv and nextafter, complex) are left to PyTorch.
"""

from __future__ import annotations

import math

import torch

from compiler_core.decomp.special import _hurwitz_zeta_right

aten = torch.ops.aten

_SQRT_PI = math.sqrt(math.pi)
_SQRT_2 = math.sqrt(2.0)
_ASYMPTOTIC_FROM = 26.0  # erfc(26) = 5.7e-296, still a normal float64
_ERFC_AT_ASYMPTOTIC = 5.663192408856143e-296
# erfinv and ndtri solve erf(x) = y for |y| <= _CENTRAL and erfc(x) = 1 - |y| beyond
_CENTRAL = 0.9
# The starts of the Halley steps, printed by scripts/special_float64_coefficients.py (lowest power first):
# erfinv(y) ~ y P(y^2) for |y| <= 0.9, to 4e-6;
_ERFINV_START = (0.8862276218834493, 0.2318062605223502, 0.13763363942915807, -0.10173827025686331,
                 1.840083973584312, -9.517997525312849, 31.371376153480856, -63.408602721110356,
                 77.82564924745752, -53.06478174980302, 15.610371783542892)
# erfc(x) = r for r <= 0.1: x ~ a P(1 / s), s = sqrt(-log r), a = sqrt(s^2 - log(sqrt(pi) s)), to 1.3e-6
_ERFC_INVERSE_START = (1.0000025160282864, -2.6861040203155047e-05, -0.0019749028983451406, 0.0541452039614093,
                       0.16307956370677376, -0.2447998192593872)
# eager's zeta gives NaN for q > 1 from here on: its series multiplies x (x + 1) ... (x + 22), which
# overflows float64 at this x, by terms that have underflowed to 0 (tests check the boundary)
_ZETA_EAGER_NAN_FROM = 25256835601046.0


def _float_input(x: torch.Tensor) -> torch.Tensor | None:
    """x itself if it is floating point, in the default dtype if it is an integer or bool; None if complex."""
    if x.is_complex():
        return None
    return x if x.is_floating_point() else x.to(torch.get_default_dtype())


# ---- the error-function family -------------------------------------------------------------------

def _erfcx_asymptotic(x: torch.Tensor, terms: int) -> torch.Tensor:
    """exp(x^2) erfc(x) for float64 x >= 26: (1 - u + 3u^2 - 15u^3 ...) / (sqrt(pi) x), u = 1 / (2x^2);
    the term after eight is below 2e-19 there, after five below 2e-13; +inf gives 0."""
    u = 0.5 / (x * x)
    series = torch.zeros_like(x)
    for n in range(terms - 1, -1, -1):
        series = series * u + (-1) ** n * math.prod(range(1, 2 * n, 2))
    return series / (_SQRT_PI * x)


def _log_erfc(x: torch.Tensor, far: torch.Tensor) -> torch.Tensor:
    """log(erfc(x)) for float64 x >= 0 (NaN stays NaN, +inf gives -inf), erfc being accurate in
    relative terms; where `far` (x >= 26, before erfc leaves float64's normal range), -x^2 + log(erfcx(x)),
    five terms of erfcx's series being an absolute 2e-13 against a result below -676. The caller gives
    `far` from its own input: a condition on x would repeat x's expression (see _erfc_inverse)."""
    return torch.where(far, torch.log(_erfcx_asymptotic(x, 5)) - x * x, torch.log(torch.special.erfc(x)))


def _exp_square(x: torch.Tensor) -> torch.Tensor:
    """exp(x^2) for float64 |x| < 27 without x^2's rounding (up to 8e-14 of the result there): x^2 = hi + lo
    exactly, by Dekker's product of x split into two 26-bit halves; exp(hi + lo) = exp(hi) (1 + lo)."""
    hi = x * x
    inside = torch.where(x.abs() < 27, x, 0.0)  # past 27 exp(hi) is inf: no correction (0 here)
    c = 134217729.0 * inside  # 2^27 + 1
    upper = c - (c - inside)
    lower = inside - upper
    lo = ((upper * upper - inside * inside) + 2 * upper * lower) + lower * lower
    return torch.exp(hi) * (1 + lo)


def _log1p(u: torch.Tensor) -> torch.Tensor:
    """log(1 + u) to float64's rounding: log(w) u / (w - 1) with w = 1 + u corrects w's rounding."""
    w = 1 + u
    return torch.where(w == 1, u, torch.log(w) * (u / torch.where(w == 1, 1.0, w - 1)))


# The inverses refine their start by one Halley step (cubic: the start's 4e-6 becomes float64's rounding),
# not more: each step's expression holds the previous one's some fifty times over, and the kernel's code
# is generated from the expanded expression.

def _erfinv_central(y: torch.Tensor) -> torch.Tensor:
    """erfinv(y) for float64 |y| <= 0.9: the fitted start, then Halley on erf(x) - y, whose second
    derivative is -2x times the first: x - u / (1 + x u) with u = (erf(x) - y) / erf'(x)."""
    square = y * y
    x = torch.zeros_like(y)
    for c in reversed(_ERFINV_START):
        x = x * square + c
    x = x * y
    u = (torch.erf(x) - y) * (0.5 * _SQRT_PI) * torch.exp(x * x)
    return x - u / (1 + x * u)


def _erfc_inverse(r: torch.Tensor) -> torch.Tensor:
    """x with erfc(x) = r, for float64 0 < r <= 0.1 (x >= 1.16): the fitted start, then Halley on
    g(x) = log(erfc(x)) + L, L = -log r, with g' = d = -2 exp(-x^2) / (sqrt(pi) erfc(x)) and
    g'' = -d (2x + d)."""
    L = -torch.log(r)
    s = torch.sqrt(L)
    inverse = 1 / s
    ratio = torch.zeros_like(s)
    for c in reversed(_ERFC_INVERSE_START):
        ratio = ratio * inverse + c
    x = ratio * torch.sqrt(L - torch.log(_SQRT_PI * s))
    log_erfc = _log_erfc(x, r < _ERFC_AT_ASYMPTOTIC)
    g = log_erfc + L
    d = (-2 / _SQRT_PI) * torch.exp(-(x * x) - log_erfc)
    return x - g / (d + 0.5 * g * (2 * x + d))


def erfcx(x: torch.Tensor) -> torch.Tensor:
    v = _float_input(x)
    if v is None or v.dtype not in (torch.float32, torch.float64):
        return NotImplemented  # eager has no half-precision erfcx
    w = v.to(torch.float64)
    near = w < _ASYMPTOTIC_FROM  # below -26.7 exp(x^2) is inf, as eager's erfcx
    out = torch.where(near, _exp_square(w) * torch.special.erfc(torch.where(near, w, 0.0)),
                      _erfcx_asymptotic(torch.where(near, _ASYMPTOTIC_FROM, w), 8))
    return out.to(v.dtype)


def log_ndtr(x: torch.Tensor) -> torch.Tensor:
    v = _float_input(x)
    if v is None or v.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    t = v.to(torch.float64) * math.sqrt(0.5)  # 1/sqrt(2) rounded once, as eager's constant
    lower = _log_erfc(-t, t <= -_ASYMPTOTIC_FROM) - math.log(2)
    upper = _log1p(-0.5 * torch.special.erfc(torch.where(t < 0, 0.0, t)))
    return torch.where(t < 0, lower, upper).to(v.dtype)


def erfinv(y: torch.Tensor) -> torch.Tensor:
    v = _float_input(y)
    if v is None:
        return NotImplemented
    w = v.to(torch.float64)
    a = w.abs()
    # both branches are computed everywhere: outside its range a branch's value is not used
    tail = _erfc_inverse(1 - a)  # 1 - |y| is exact for |y| >= 1/2
    out = torch.where(a <= _CENTRAL, _erfinv_central(w), torch.where(w < 0, -tail, tail))
    out = torch.where(a == 1, torch.where(w < 0, float("-inf"), float("inf")), out)
    out = torch.where((a > 1) | torch.isnan(w), float("nan"), out)
    return out.to(v.dtype)


def ndtri(p: torch.Tensor) -> torch.Tensor:
    v = _float_input(p)
    if v is None or v.dtype not in (torch.float32, torch.float64):
        return NotImplemented
    w = v.to(torch.float64)
    y = 2 * w - 1  # exact for float32 p; for float64 p below 1/4 within 2^-54
    central = y.abs() <= _CENTRAL
    tail = _SQRT_2 * _erfc_inverse(torch.where(w < 0.5, 2 * w, 2 * (1 - w)))  # r exact
    out = torch.where(central, _SQRT_2 * _erfinv_central(y), torch.where(w < 0.5, -tail, tail))
    out = torch.where(w == 0, float("-inf"), torch.where(w == 1, float("inf"), out))
    out = torch.where((w < 0) | (w > 1) | torch.isnan(w), float("nan"), out)
    return out.to(v.dtype)


# ---- Hurwitz zeta --------------------------------------------------------------------------------

def _zeta_dtype(x, q) -> torch.dtype | None:
    dtype = torch.result_type(x, q)
    if dtype.is_complex:
        return None
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def zeta(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    dtype = _zeta_dtype(x, q)
    if dtype not in (torch.float32, torch.float64):
        return NotImplemented  # eager has no half-precision (or complex) zeta
    xd, qd = x.to(torch.float64), q.to(torch.float64)
    positive = qd > 0
    f = -qd - torch.floor(-qd)  # frac(-q), in (0, 1) for a negative non-integer q
    f = torch.where(f > 0, f, 0.5)
    direct = _hurwitz_zeta_right(xd, torch.where(positive, qd, f))
    beyond = _hurwitz_zeta_right(xd, torch.where(positive, 1.0, 1 - qd))
    mirrored = _hurwitz_zeta_right(xd, 1 - f)
    # the terms with q + k < 0 have the sign (-1)^x; for odd x they cancel the mirrored ones, exactly
    # when f = 1/2, so those two are subtracted first
    odd = (xd - 2 * torch.floor(xd / 2)) == 1
    reflected = torch.where(odd, (mirrored - direct) + beyond, (direct - beyond) + mirrored)
    out = torch.where(positive, direct, reflected)
    # eager's special values, the later rule winning
    leading = torch.pow(qd, -xd)
    huge = torch.where(positive, torch.where(leading == 0, float("nan"), leading), float("inf"))
    out = torch.where(xd >= _ZETA_EAGER_NAN_FROM, huge, out)
    nan = (qd == float("inf")) | torch.isnan(xd) | torch.isnan(qd)
    nan = nan | ((qd <= 0) & (xd != torch.floor(xd)))
    out = torch.where(nan, float("nan"), out)
    out = torch.where((qd <= 0) & (qd == torch.floor(qd)), float("inf"), out)
    out = torch.where(xd < 1, float("nan"), torch.where(xd == 1, float("inf"), out))
    return out.to(dtype)


def _zeta_self_scalar(x, q: torch.Tensor) -> torch.Tensor:
    dtype = _zeta_dtype(x, q)
    if dtype is None:
        return NotImplemented
    return zeta(torch.full_like(q, x, dtype=dtype), q)


def _zeta_other_scalar(x: torch.Tensor, q) -> torch.Tensor:
    dtype = _zeta_dtype(x, q)
    if dtype is None:
        return NotImplemented
    return zeta(x, torch.full_like(x, q, dtype=dtype))


# ---- nextafter -----------------------------------------------------------------------------------

# mantissa bits (with the implicit one), largest finite value, smallest subnormal
_FORMATS = {torch.float64: (53, torch.finfo(torch.float64).max, 2.0 ** -1074),
            torch.float32: (24, torch.finfo(torch.float32).max, 2.0 ** -149),
            torch.float16: (11, torch.finfo(torch.float16).max, 2.0 ** -24),
            torch.bfloat16: (8, torch.finfo(torch.bfloat16).max, 2.0 ** -133)}


def _step_away(x: torch.Tensor, up: torch.Tensor, bits: int, tiny: float) -> torch.Tensor:
    """x +- delta with delta = 1.25 |x| 2^-bits: between 5/8 and 5/4 of the gap above or below any x of a
    format with `bits` mantissa bits (5/4 of the halved gap below a power of two), at least the
    subnormal gap `tiny`."""
    delta = torch.where(x.abs() * (1.25 * 2.0 ** -bits) > tiny, x.abs() * (1.25 * 2.0 ** -bits), tiny)
    return torch.where(up, x + delta, x - delta)


def nextafter(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    dtype = torch.result_type(x, y)
    if dtype not in _FORMATS:
        return NotImplemented  # eager has no integer nextafter
    bits, largest, tiny = _FORMATS[dtype]
    xd, yd = x.to(dtype).to(torch.float64), y.to(dtype).to(torch.float64)
    up = yd > xd
    if dtype == torch.float64:
        # rounded by the addition itself: delta must not lose bits as a subnormal, so below 2^-900 x is
        # scaled by 2^200 (exactly), and below 2^-1021, where every gap is 2^-1074, delta is that
        scale = torch.where(xd.abs() < 2.0 ** -900, 2.0 ** 200, torch.ones_like(xd))
        moved = _step_away(xd * scale, up, bits, tiny) / scale
        moved = torch.where(xd.abs() < 2.0 ** -1021, torch.where(up, xd + tiny, xd - tiny), moved)
    else:
        moved = _step_away(xd, up, bits, tiny)  # exact in float64; the cast below rounds to the neighbour
    moved = torch.where(moved == 0, xd * 0, moved)  # a step onto zero keeps x's sign, as C's nextafter
    moved = torch.where(xd.abs() == float("inf"), torch.sign(xd) * largest, moved)
    out = torch.where(xd == yd, yd, moved)
    out = torch.where(torch.isnan(xd) | torch.isnan(yd), xd + yd, out)
    return out.to(dtype)


SPECIAL_FLOAT64 = {aten.special_erfcx.default: erfcx, aten.special_log_ndtr.default: log_ndtr,
                   aten.erfinv.default: erfinv, aten.special_ndtri.default: ndtri,
                   aten.special_zeta.default: zeta, aten.special_zeta.self_scalar: _zeta_self_scalar,
                   aten.special_zeta.other_scalar: _zeta_other_scalar, aten.nextafter.default: nextafter}
