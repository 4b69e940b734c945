"""Prints the starting approximations of erfinv and ndtri for compiler_core/decomp/special_float64.py.

Both are fitted with mpmath (a Chebyshev fit to mpmath's erfinv and to roots mpmath finds), then refined
in the decomposition by Halley steps, so a fit only has to be good to a few parts in 10^3 (central,
two steps) or 10^6 (tail, one step):

- central, |y| <= 0.9: erfinv(y) / y as a polynomial in y^2;
- tail, erfc(x) = r for r <= 0.1: with s = sqrt(-log r) and the asymptote a = sqrt(s^2 - log(sqrt(pi) s)),
  x / a as a polynomial in 1 / s, for s up to 27.3 (r = 2 p at float64's smallest subnormal p).

    .venv/bin/python scripts/special_float64_coefficients.py
"""

from __future__ import annotations

import mpmath

CENTRAL = 0.9
CENTRAL_DEGREE = 10
TAIL_R = 0.1
TAIL_S = 27.3
TAIL_DEGREE = 5


def erfinv_over_y(u):
    """erfinv(sqrt(u)) / sqrt(u), with its limit sqrt(pi) / 2 at u = 0."""
    if u == 0:
        return mpmath.sqrt(mpmath.pi) / 2
    return mpmath.erfinv(mpmath.sqrt(u)) / mpmath.sqrt(u)


def tail_ratio(v):
    """x / a at s = 1 / v, x the root of log(erfc(x)) = -s^2."""
    s = 1 / v
    asymptote = mpmath.sqrt(s * s - mpmath.log(mpmath.sqrt(mpmath.pi) * s))
    root = mpmath.findroot(lambda x: mpmath.log(mpmath.erfc(x)) + s * s, asymptote)
    return root / asymptote


def fit(name, f, interval, degree, scale):
    coefficients, error = mpmath.chebyfit(f, interval, degree + 1, error=True)
    lowest_first = ", ".join(repr(float(c)) for c in reversed(coefficients))
    print(f"# {name}: {len(coefficients)} coefficients, lowest power first; error {float(error / scale):.1e} relative")
    return lowest_first


def main() -> None:
    mpmath.mp.dps = 30
    central = fit("erfinv(y) / y in y^2, |y| <= 0.9", erfinv_over_y, [0, CENTRAL ** 2], CENTRAL_DEGREE,
                  mpmath.sqrt(mpmath.pi) / 2)
    print(f"_ERFINV_START = ({central})")
    low = 1 / mpmath.sqrt(-mpmath.log(TAIL_R))
    tail = fit("x / a in 1 / s, r <= 0.1", tail_ratio, [1 / mpmath.mpf(TAIL_S), low], TAIL_DEGREE, 1)
    print(f"_ERFC_INVERSE_START = ({tail})")


if __name__ == "__main__":
    main()
