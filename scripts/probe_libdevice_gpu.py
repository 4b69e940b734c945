"""Which of our libdevice-backed float32 functions differ from eager's on the GPU, bit for bit, and
whether Triton's FMA contraction (enable_fp_fusion, off in our kernels) changes that: eager's CUDA
kernels are compiled by nvcc, which contracts by default (-fmad=true), libdevice's inlined code too."""
import sys

import torch

import compiler_core as cc
from compiler_core.codegen.triton import kernel as triton_kernel

torch.manual_seed(0)
x, y = torch.randn(1 << 22, device="cuda"), torch.randn(1 << 22, device="cuda")
FUNCTIONS = {
    "hypot": lambda x, y: torch.hypot(x, y * 3),
    "asinh": lambda x, y: torch.asinh(x * 5),
    "acosh": lambda x, y: torch.acosh(y.abs() * 4 + 1),
    "atan2": lambda x, y: torch.atan2(x, y),
    "log1p": lambda x, y: torch.log1p(y.abs()),
    "tanh": lambda x, y: torch.tanh(x),
    "erf": lambda x, y: torch.erf(x),
    "sin": lambda x, y: torch.sin(x * 10),
    "pow": lambda x, y: torch.pow(y.abs(), x),
    "atanh": lambda x, y: torch.atanh(y.clamp(-0.99, 0.99)),
}


def ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.view(torch.int32).long() - b.view(torch.int32).long()).abs().max())


# One setting per process (run it with a kernel cache of its own: the options are not in every key).
fusion = sys.argv[1:] == ["--fusion"]
triton_kernel.EXACT_FLOAT_OPTIONS = {"enable_reflect_ftz": False, "enable_fp_fusion": fusion}
if True:
    for name, fn in FUNCTIONS.items():
        torch._dynamo.reset()
        try:
            got, want = cc.compile(fn)(x, y), fn(x, y)
        except Exception as exc:  # noqa: BLE001 - a probe: report and go on
            print(f"fusion={fusion} {name}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        differ = ~((got == want) | (got.isnan() & want.isnan()))
        print(f"fusion={fusion} {name:6s} differ {int(differ.sum()):8d} of {got.numel()}"
              + (f"  max ulp {ulps(got[differ], want[differ])}" if differ.any() else ""))
        sys.stdout.flush()
