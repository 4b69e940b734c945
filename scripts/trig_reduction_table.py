"""Prints the table of 2^E mod 2 pi that the C++ kernels' sin and cos for float reduce large arguments with
(compiler_core/codegen/cpp/prelude.py, `fc::TWO_POW_MOD_TWO_PI_HI` and `_LO`).

A float of magnitude 2^24 or more is an integer m * 2^E (m < 2^24, 1 <= E <= 104), so x mod 2 pi is
m * (2^E mod 2 pi) mod 2 pi: each entry is 2^E mod 2 pi as two doubles (hi + lo, about 106 bits, in
two tables), computed with mpmath at 400 digits. Entry 0 is 1 (small arguments use x itself).

    .venv/bin/python scripts/trig_reduction_table.py
"""

from __future__ import annotations

import mpmath


def main() -> None:
    mpmath.mp.dps = 400
    two_pi = 2 * mpmath.pi
    his, los = [], []
    for e in range(105):
        c = mpmath.fmod(mpmath.mpf(2) ** e, two_pi)
        hi = float(c)
        his.append(repr(hi))
        los.append(repr(float(c - mpmath.mpf(hi))))
    for name, values in (("TWO_POW_MOD_TWO_PI_HI", his), ("TWO_POW_MOD_TWO_PI_LO", los)):
        print(f"static const double {name}[105] = {{")
        for i in range(0, len(values), 4):
            print("  " + ", ".join(values[i:i + 4]) + ",")
        print("};")


if __name__ == "__main__":
    main()
