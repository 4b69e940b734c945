"""Where our CUDA complex atanh/atan differ from C's answer in the sign of a zero, an infinity or pi/2
(tests/test_complex.py's edge grid on the GPU): prints each differing input and both results."""
import torch

import compiler_core as cc

edges = [0.0, -0.0, 1e-300, 1e-170, 1e-20, 0.3, 0.5, 0.75, 0.9, 1.0, -1.0, 1.0 + 2 ** -52, 1 - 2 ** -53, 2.0,
         1e10, 1e17, 1e300, float("inf"), float("-inf"), float("nan")]
narrow = [0.0, -0.0, 1e-40, 1e-20, 0.3, 0.75, 1.0, -1.0, 1.0000001, 0.99999994, 2.0, 1e10, 3e38,
          float("inf"), float("nan")]
z = torch.tensor([complex(a, b) for a in edges for b in edges], dtype=torch.complex128)
w = torch.tensor([complex(a, b) for a in narrow for b in narrow], dtype=torch.complex64)


def fn(z, w):
    return torch.atanh(z), torch.atan(z), torch.atanh(w), torch.atan(w)


got = cc.compile(fn)(z.cuda(), w.cuda())
want = fn(z, w)
for name, inputs, g, e in zip(["atanh128", "atan128", "atanh64", "atan64"], [z, z, w, w], got, want):
    g, e = torch.view_as_real(g.cpu()), torch.view_as_real(e)
    special = (e == 0) | e.isinf() | (e.abs() == torch.pi / 2)
    bad = (g.signbit() != e.signbit()) & special
    rows = bad.any(1).nonzero().flatten().tolist()
    print(name, len(rows), "differ in a sign")
    for r in rows[:12]:
        print("  ", complex(inputs[r]), "ours", g[r].tolist(), "C", e[r].tolist())
