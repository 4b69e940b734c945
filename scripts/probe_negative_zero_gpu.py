"""Which output of tests/test_numerics.py's -0.0 literal test differs from eager CUDA, with the kernels'
source: `PYTHONPATH=. python scripts/probe_negative_zero_gpu.py` on the GPU machine."""

import torch

import compiler_core as cc

NAMES = ["clamp(-0,0)", "where(x>0,-0,1)", "atan2(-0,x)", "pow(-0,x)", "pow(x,inf)", "pow(x,-inf)",
         "minimum(x,-0)", "x*-0"]


def fn(x):
    return (x.clamp(-0.0, 0.0), torch.where(x > 0, -0.0, 1.0), torch.atan2(torch.full_like(x, -0.0), x),
            torch.pow(torch.full_like(x, -0.0), x), torch.pow(x, float("inf")), torch.pow(x, float("-inf")),
            torch.minimum(x, torch.full_like(x, -0.0)), x * -0.0)


# fp32 first and last: the test failed for fp32 only, as the first test of its session
for run, dtype in enumerate((torch.float32, torch.float64, torch.bfloat16, torch.float32)):
    x = torch.tensor([-0.0, 0.0, -1.5, 2.5, float("nan"), float("-inf"), 3.0], dtype=dtype, device="cuda")
    compiled = cc.compile(fn)
    for name, got, expected in zip(NAMES, compiled(x), fn(x)):
        same = torch.equal(got.nan_to_num().signbit(), expected.nan_to_num().signbit()) and \
            torch.allclose(got.float(), expected.float(), equal_nan=True)
        print(f"{str(dtype):16} {name:18} {'ok' if same else 'DIFFERS'}  got {got.tolist()}  eager {expected.tolist()}")
    if run == 0:
        for k in compiled.session.kernels:
            print(k.source)
