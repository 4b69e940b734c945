"""Which loops of a C++ translation unit GCC vectorises, for a given x86 vector instruction set.

Kernels are built with `-march=native`, so the same source meets AVX-512 on one machine and only AVX2
on another, and GCC 12 vectorised loops with AVX-512 that it left scalar with AVX2: a ternary with a
constant arm in our exp (`x < -104 ? -104 : x`), an int64 -> double conversion in our sin (AVX2 has
none), a relu ternary per tap of a 3x3 max pool. AVX-512's mask registers hid each. Compiling with
each set's flags added (never running) lets one machine answer for both; tests and
`scripts/vector_isa_survey.py` ask here.
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess
import tempfile

from compiler_core.runtime.cpp_build import CXX_FLAGS, _compiler

# Flags added to ours (-march=native) to build for one instruction set whatever this machine has.
ISAS = {"AVX2": ("-mno-avx512f",), "AVX-512": ("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq")}


@functools.lru_cache(maxsize=None)
def can_compare() -> bool:
    """Whether this machine can answer: an x86-64 machine (ISAS are x86's) whose C++ compiler (CXX) is
    GCC, whose -fopt-info-vec report this module reads."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        done = subprocess.run([_compiler(), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and "Free Software Foundation" in done.stdout and "clang" not in done.stdout


def vectorized_loop_lines(source: str, isa: tuple[str, ...]) -> set[int]:
    """Source lines at which GCC reports a loop vectorised (-fopt-info-vec) when `source` is compiled
    with our flags and `isa`'s. GCC names a loop by a line of its body or header, the same line for
    both instruction sets, so two sets differ exactly where one set vectorises a loop the other does
    not (the counts differ anyway: epilogue loops are vectorised with other widths)."""
    report, _ = _compile(source, isa)
    return {int(m) for m in re.findall(r"k\.cpp:(\d+):\d+: optimized: loop vectorized", report)}


def fused_add_subtracts(source: str, isa: tuple[str, ...]) -> list[str]:
    """The vfmaddsub/vfmsubadd instructions in `source`'s assembly for `isa`: none of our code asks for
    one (our explicit FMAs are plain vfmadd), so each is GCC contracting a multiply with the add or
    subtract after it despite -ffp-contract=off. GCC 12's SLP vectoriser does so where lanes alternate
    `a*b - c` and `a*b + c` (a complex product); the value then rounds once where eager rounds twice."""
    _, assembly = _compile(source, isa)
    return re.findall(r"\bvfm(?:addsub|subadd)\w*", assembly)


@functools.lru_cache(maxsize=8)
def _compile(source: str, isa: tuple[str, ...]) -> tuple[str, str]:
    """GCC's vectorisation report and the assembly for `source` built with our flags and `isa`'s."""
    with tempfile.TemporaryDirectory() as folder:
        with open(f"{folder}/k.cpp", "w") as f:
            f.write(source)
        flags = [f for f in CXX_FLAGS if f != "-shared"] + list(isa)
        done = subprocess.run([_compiler(), *flags, "-S", f"{folder}/k.cpp", "-o", f"{folder}/k.s",
                               "-fopt-info-vec-optimized"], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{_compiler()} failed on the translation unit:\n{done.stderr[-2000:]}")
        with open(f"{folder}/k.s") as f:
            return done.stderr, f.read()


def scalar_only_with(source: str) -> dict[str, list[str]]:
    """For each instruction set, the source lines of loops vectorised with the other set only."""
    lines = {name: vectorized_loop_lines(source, isa) for name, isa in ISAS.items()}
    text = source.splitlines()
    (a, la), (b, lb) = lines.items()
    return {a: [text[n - 1].strip() for n in sorted(lb - la)], b: [text[n - 1].strip() for n in sorted(la - lb)]}
