"""Price of Triton's debug build (kept for tl.device_assert) on kernels whose positions come from memory.
Run twice: FC_NO_ASSERT=1 compiles the same kernels without assert options (the asserts are dropped)."""
import json, os, sys
import torch, torch.nn.functional as F
import compiler_core as cc
import compiler_core.codegen.triton.kernel as tk
if os.environ.get("FC_NO_ASSERT"):
    tk.ASSERT_OPTIONS = {}
torch.manual_seed(0)
dev = "cuda"

def seg_loss(logits, labels):
    up = F.interpolate(logits, size=(224, 224), mode="bilinear", align_corners=False)
    return F.cross_entropy(up.float(), labels)

def seg_up(logits):
    up = F.interpolate(logits, size=(224, 224), mode="bilinear", align_corners=False)
    return up.float().log_softmax(1)

def emb_ln(w, wp, ids):
    pos = torch.arange(ids.shape[1], device=ids.device)
    return F.layer_norm(F.embedding(ids, w) + F.embedding(pos, wp), (768,))

def lm_loss(logits, labels):
    return F.cross_entropy(logits, labels)

CASES = {
    "seg_loss_bf16": (seg_loss, lambda: (torch.randn(8, 19, 56, 56, device=dev, dtype=torch.bfloat16)
                                         .to(memory_format=torch.channels_last),
                                         torch.randint(0, 19, (8, 224, 224), device=dev))),
    "seg_up_bf16": (seg_up, lambda: (torch.randn(8, 19, 56, 56, device=dev, dtype=torch.bfloat16)
                                     .to(memory_format=torch.channels_last),)),
    "emb_ln": (emb_ln, lambda: (torch.randn(50257, 768, device=dev), torch.randn(1024, 768, device=dev),
                                torch.randint(0, 50257, (8, 1024), device=dev))),
    "lm_loss": (lm_loss, lambda: (torch.randn(4096, 50257, device=dev), torch.randint(0, 50257, (4096,), device=dev))),
}

def median_ms(call, repeats=50):
    for _ in range(5):
        call()
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); call(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return sorted(ts)[len(ts) // 2]

rows = {}
for name, (fn, make) in CASES.items():
    args = make()
    ours = cc.compile(fn)
    out = ours(*args)
    ok = torch.allclose(out.float(), fn(*args).float(), rtol=1e-3, atol=1e-3)
    asserts = sum(k.source.count("tl.device_assert(") for k in ours.session.kernels)
    row = {"ok": ok, "asserts": asserts, "kernels": len(ours.session.kernels), "ours_ms": median_ms(lambda: ours(*args))}
    if not os.environ.get("FC_NO_ASSERT"):
        ind = torch.compile(fn)
        ind(*args)
        row["inductor_ms"] = median_ms(lambda: ind(*args))
    rows[name] = row
    print(name, row, flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=1)
