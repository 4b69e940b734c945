"""Which of the zoo's C++ kernels GCC vectorises for one vector instruction set and not the other.

    PYTHONPATH=. python scripts/vector_isa_survey.py                  # every zoo model, fp32 and bf16
    PYTHONPATH=. python scripts/vector_isa_survey.py gpt2,resnet      # some of them

Each kernel's translation unit is compiled with our flags (-march=native) plus `-mno-avx512f` (AVX2)
and plus AVX-512's flags, never run, so one machine answers for both. A loop under `#pragma omp
simd` that GCC vectorises with one and not the other is printed with the kernel's name: the kernels
are the same everywhere, and a user's machine may have either (a 3x3 max pool over a padded batch
norm ran scalar on an AVX2 machine while it vectorised with AVX-512: a NaN-aware maximum written with
early returns kept its branches there).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile

import torch

import compiler_core as cc
from compiler_core.runtime.cpp_build import CXX_FLAGS, _compiler, cpp_translation_unit
from tests.models.zoo import ZOO

ISAS = {"AVX2": ["-mno-avx512f"], "AVX-512": ["-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq"]}


def vectorized_lines(source: str, isa: list[str]) -> set[int]:
    """Lines of `source` whose loop GCC reports vectorised with our flags and `isa`."""
    with tempfile.TemporaryDirectory() as folder:
        with open(f"{folder}/k.cpp", "w") as f:
            f.write(source)
        flags = [f for f in CXX_FLAGS if f != "-shared"] + isa
        done = subprocess.run([_compiler(), *flags, "-c", f"{folder}/k.cpp", "-o", f"{folder}/k.o",
                               "-fopt-info-vec-optimized"], capture_output=True, text=True)
    return {int(m) for m in re.findall(r"k\.cpp:(\d+):\d+: optimized: loop vectorized", done.stderr)}


def main(names: list[str]) -> int:
    differing = 0
    for name in names:
        for dtype in (torch.float32, torch.bfloat16):
            try:
                case = ZOO[name].build("small", "cpu", dtype)
            except Exception as why:  # noqa: BLE001 - a model eager cannot build in this dtype
                print(f"{name} {dtype}: not built ({type(why).__name__})")
                continue
            compiled = cc.compile(case.model, backend="cpp")
            with torch.no_grad():
                compiled(**case.inputs)
            kernels = compiled.session.kernels
            for kernel in kernels:
                source = cpp_translation_unit((kernel,))
                lines = source.splitlines()
                simd = [i + 2 for i, line in enumerate(lines) if "#pragma omp simd" in line]  # the `for` after it
                missed = {isa: [n for n in simd if n not in vectorized_lines(source, flags)]
                          for isa, flags in ISAS.items()}
                if missed["AVX2"] != missed["AVX-512"]:
                    differing += 1
                    print(f"{name} {dtype} {kernel.name}: {len(simd)} simd loops, scalar with AVX2 "
                          f"{len(missed['AVX2'])}, with AVX-512 {len(missed['AVX-512'])}", flush=True)
            print(f"{name} {dtype}: {len(kernels)} kernels", flush=True)
    print(f"{differing} kernels vectorise differently")
    return differing


if __name__ == "__main__":
    sys.exit(main(sys.argv[1].split(",") if len(sys.argv) > 1 else list(ZOO)))
