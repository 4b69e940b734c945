"""Polynomial fits of the scaled modified Bessel functions K0 and K1 for x >= 1, for compiler_core/decomp/bessel.py.

    python scripts/fit_bessel.py        # prints the two coefficient tuples, then the fits' errors

Up to x = 1 bessel.py sums the power series of K0 and K1 (their log term and harmonic numbers): there
their terms barely cancel, while at x = 2 they cancel to a tenth (1e-15 relative error in float64), and
from x ~ 5 up catastrophically; K's asymptotic series reaches float64's precision only from x ~ 20. So
for every x >= 1 we approximate

    g_nu(x) = exp(x) sqrt(x) K_nu(x)        (smooth, from g(1) ~ 1.1 / 1.6 to sqrt(pi / 2) at infinity)

by a polynomial in t = 2 / x - 1, which maps [1, inf] onto [1, -1]: the Chebyshev interpolant of g at 60
nodes (mpmath's K at 40 digits, the discrete cosine sum), cut where the remaining coefficients fall below
1e-17 (float64's rounding of g), then written in powers of t, which bessel.py evaluates by Horner's rule.
(Clenshaw's recurrence reuses each partial sum twice, and our IR, a tree, would copy it exponentially.)
The power form is well conditioned here: the sum of its coefficients' magnitudes is about g itself.
"""

from __future__ import annotations

import math

import mpmath as mp

NODES = 60  # Chebyshev nodes of the interpolant; coefficients beyond ~25 are below 1e-20
CUT = 1e-17


def scaled_k(nu: int, t: mp.mpf) -> mp.mpf:
    x = 2 / (t + 1)
    return mp.exp(x) * mp.sqrt(x) * mp.besselk(nu, x)


def chebyshev_coefficients(nu: int) -> list[mp.mpf]:
    """c_0 .. c_n with g(t) = c_0 / 2 + sum_j c_j T_j(t), up to the last coefficient above CUT."""
    angles = [mp.pi * (k + mp.mpf(1) / 2) / NODES for k in range(NODES)]
    values = [scaled_k(nu, mp.cos(a)) for a in angles]
    coefficients = [2 * mp.fsum(v * mp.cos(j * a) for v, a in zip(values, angles)) / NODES for j in range(NODES)]
    last = max(j for j, c in enumerate(coefficients) if abs(c) > CUT)
    return coefficients[: last + 1]


def power_coefficients(chebyshev: list[mp.mpf]) -> list[float]:
    """m_0 .. m_n with c_0 / 2 + sum_j c_j T_j(t) = sum_k m_k t^k (T_(j+1) = 2t T_j - T_(j-1), in mpmath)."""
    basis = [[mp.mpf(1)], [mp.mpf(0), mp.mpf(1)]]
    while len(basis) < len(chebyshev):
        doubled = [mp.mpf(0)] + [2 * b for b in basis[-1]]
        basis.append([b - (basis[-2][i] if i < len(basis[-2]) else 0) for i, b in enumerate(doubled)])
    power = [mp.mpf(0)] * len(chebyshev)
    for j, c in enumerate(chebyshev):
        for k, b in enumerate(basis[j]):
            power[k] += (c / 2 if j == 0 else c) * b
    return [float(m) for m in power]


def horner(coefficients: list[float], t: float) -> float:
    """The float64 evaluation bessel.py does (there on tensors)."""
    out = 0.0
    for m in reversed(coefficients):
        out = out * t + m
    return out


def main() -> None:
    mp.mp.dps = 40
    fits = {nu: power_coefficients(chebyshev_coefficients(nu)) for nu in (0, 1)}
    for nu, coefficients in fits.items():
        print(f"_K{nu}_SCALED_POLYNOMIAL = (  # scripts/fit_bessel.py: exp(x) sqrt(x) K{nu}(x) in t = 2 / x - 1")
        for i in range(0, len(coefficients), 3):
            print("    " + " ".join(f"{c!r}," for c in coefficients[i:i + 3]))
        print(")")
    for nu, coefficients in fits.items():  # relative error of the float64 evaluation over [1, 1e6]
        worst = 0.0
        for i in range(4001):
            x = math.exp(i / 4000 * math.log(1e6))
            exact = mp.exp(x) * mp.sqrt(x) * mp.besselk(nu, x)
            worst = max(worst, float(abs(horner(coefficients, 2 / x - 1) - exact) / exact))
        print(f"# K{nu}: degree {len(coefficients) - 1}, max relative error {worst:.2e} on [1, 1e6], "
              f"sum of |coefficients| {sum(map(abs, coefficients)):.3f}")


if __name__ == "__main__":
    main()
