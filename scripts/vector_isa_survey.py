"""Which of the zoo's C++ kernels GCC vectorises for one vector instruction set and not the other.

    PYTHONPATH=. python scripts/vector_isa_survey.py                  # every zoo model, fp32 and bf16
    PYTHONPATH=. python scripts/vector_isa_survey.py gpt2,resnet      # some of them

Each kernel's translation unit is compiled with our flags (-march=native) plus `-mno-avx512f` (AVX2)
and plus AVX-512's flags, never run, so one machine answers for both. A loop under `#pragma omp
simd` that GCC vectorises with one and not the other is printed with the kernel's name and the line
GCC names it by: the kernels are the same everywhere, and a user's machine may have either
(compiler_core/runtime/vectorization.py lists what ran scalar with AVX2 only). It also prints every
kernel whose assembly holds a vfmaddsub or vfmsubadd, which GCC 12 forms despite -ffp-contract=off
(fused_add_subtracts says where). Its first version
compared the `for` line under each pragma, a line GCC never reports, and so found nothing.
"""

from __future__ import annotations

import sys

import torch

import compiler_core as cc
from compiler_core.runtime.cpp_build import cpp_translation_unit
from compiler_core.runtime.vectorization import ISAS, fused_add_subtracts, scalar_only_with
from tests.models.zoo import ZOO


def main(names: list[str]) -> int:
    differing = fused = 0
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
                for isa, lines in scalar_only_with(source).items():
                    if lines:
                        differing += 1
                        print(f"{name} {dtype} {kernel.name}: scalar with {isa} only, at {lines}", flush=True)
                for isa, flags in ISAS.items():
                    if contracted := fused_add_subtracts(source, flags):
                        fused += 1
                        print(f"{name} {dtype} {kernel.name}: {len(contracted)} {contracted[0]} with {isa} "
                              "(one rounding where eager rounds twice)", flush=True)
            print(f"{name} {dtype}: {len(kernels)} kernels", flush=True)
    print(f"{differing} kernels vectorise differently; {fused} kernel builds fuse an add or subtract "
          "into a multiply")
    return differing + fused


if __name__ == "__main__":
    sys.exit(main(sys.argv[1].split(",") if len(sys.argv) > 1 else list(ZOO)))
