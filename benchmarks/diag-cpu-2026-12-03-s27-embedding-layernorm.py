import sys, time, torch
sys.path.insert(0, '.')
import compiler_core as cc
torch.set_num_threads(1)
torch.manual_seed(0)
emb = torch.nn.Embedding(50257, 768); pos = torch.nn.Embedding(1024, 768); ln = torch.nn.LayerNorm(768)
def f(ids):
    p = torch.arange(ids.shape[1])
    return ln(emb(ids) + pos(p))
ids = torch.randint(0, 50257, (2, 128))
with torch.no_grad():
    g = cc.compile(f)
    ind = torch.compile(f)
    torch.testing.assert_close(g(ids), f(ids)); ind(ids)
    res = {}
    for name, fn in (("ours", g), ("inductor", ind), ("eager", f)) * 3:
        t = time.perf_counter()
        for _ in range(200): fn(ids)
        res.setdefault(name, []).append((time.perf_counter() - t) / 200 * 1e6)
    print({k: round(min(v), 1) for k, v in res.items()})
