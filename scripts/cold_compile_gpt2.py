"""Cold compile time of a 2-layer GPT-2 forward (transformers, random init, hidden 768, 12 heads; one
sequence of 128 tokens), ours or Inductor's, each in a fresh process with empty caches.

    PYTHONPATH=. python scripts/cold_compile_gpt2.py ours
    PYTHONPATH=. python scripts/cold_compile_gpt2.py inductor
    PYTHONPATH=. python scripts/cold_compile_gpt2.py ours --device cuda

Prints the first compiled call's time and an eager call's; their difference is the compile. The result
is checked against eager. Run it on an otherwise idle machine: both compilers run C++ or Triton builds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

parser = argparse.ArgumentParser()
parser.add_argument("compiler", choices=["ours", "inductor"])
parser.add_argument("--device", default="cpu")
options = parser.parse_args()
caches = tempfile.mkdtemp(prefix=f"cold-{options.compiler}-")  # before torch is imported: both read them then
os.environ["FCOMPILE_CACHE_DIR"] = os.path.join(caches, "fcompile")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(caches, "inductor")
os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
# Triton's own cache of compiled kernels (~/.triton/cache unless set): ours reads it, so a second run of
# ours would find its kernels built by the first (Inductor keeps its Triton cache in its own directory).
os.environ["TRITON_CACHE_DIR"] = os.path.join(caches, "triton")

import torch  # noqa: E402
import transformers  # noqa: E402


def timed_call(fn, ids):
    if options.device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    logits = fn(input_ids=ids).logits
    if options.device == "cuda":
        torch.cuda.synchronize()
    return logits, time.perf_counter() - start


torch.manual_seed(0)
config = transformers.GPT2Config(n_layer=2, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
model = transformers.GPT2LMHeadModel(config).eval().to(options.device)
ids = torch.randint(0, config.vocab_size, (1, 128), device=options.device)
with torch.no_grad():
    timed_call(model, ids)
    expected, eager_s = timed_call(model, ids)
    if options.compiler == "ours":
        import compiler_core as cc

        compiled = cc.compile(model)
    else:
        compiled = torch.compile(model)
    got, first_s = timed_call(compiled, ids)
torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
print(f"{options.compiler} ({options.device}): first call {first_s:.2f} s, eager call {eager_s:.3f} s, "
      f"compile {first_s - eager_s:.2f} s")
