"""GPT-2's token + position embedding and layer norm on the CPU, one thread: ours, Inductor, eager.

    PYTHONPATH=. python benchmarks/diag-cpu-2026-12-03-s27-embedding-layernorm.py

Prints the best of three rounds of 200 calls each, in microseconds per call.
"""

import time

import torch

import compiler_core as cc

torch.set_num_threads(1)
torch.manual_seed(0)
tokens, positions, norm = torch.nn.Embedding(50257, 768), torch.nn.Embedding(1024, 768), torch.nn.LayerNorm(768)


def embed(ids):
    return norm(tokens(ids) + positions(torch.arange(ids.shape[1])))


ids = torch.randint(0, 50257, (2, 128))
with torch.no_grad():
    ours, inductor = cc.compile(embed), torch.compile(embed)
    torch.testing.assert_close(ours(ids), embed(ids))
    inductor(ids)
    best: dict[str, float] = {}
    for name, fn in (("ours", ours), ("inductor", inductor), ("eager", embed)) * 3:
        start = time.perf_counter()
        for _ in range(200):
            fn(ids)
        best[name] = min(best.get(name, float("inf")), (time.perf_counter() - start) / 200 * 1e6)
    print({name: round(us, 1) for name, us in best.items()})
