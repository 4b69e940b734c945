"""Time one token of text generation with a key/value cache: eager, ours and Inductor, each checked
against eager first (the same greedy tokens).

    PYTHONPATH=. python scripts/decode_bench.py --device cpu --json build/decode-cpu.json
    PYTHONPATH=. python scripts/decode_bench.py --device cuda

Rows: transformers' Llama with its StaticCache (index_copy_ into preallocated tensors) and with its
DynamicCache (concatenation between calls), and a gpt-fast-style attention layer whose cache is
updated with `cache[:, :, positions] = new`. The step is timed after a prompt and warm-up steps, the
median of the samples (CUDA: synchronized). Ours is compiled with `dynamic=None`, torch.compile's
default, which a DynamicCache needs (README: text generation)."""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time
from typing import Callable

import torch
import transformers as tf

import compiler_core as cc

# transformers 5.x renamed `past_key_values` to `cache` (5.25 warns about the old name); older 5.x
# releases, as on the GPU machine, take only the old one.
CACHE_ARG = "cache" if "cache" in inspect.signature(tf.LlamaForCausalLM.forward).parameters else "past_key_values"

SIZES = {  # (hidden, layers, heads, kv heads, cache rows)
    "cpu": (256, 4, 8, 4, 2048),
    "cuda": (1024, 8, 16, 8, 4096),
}


def _llama(device: str) -> tuple[tf.LlamaConfig, torch.nn.Module]:
    hidden, layers, heads, kv_heads, rows = SIZES[device]
    config = tf.LlamaConfig(vocab_size=1000, hidden_size=hidden, intermediate_size=2 * hidden,
                            num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                            max_position_embeddings=rows, use_cache=True, pad_token_id=0, bos_token_id=1,
                            eos_token_id=2)
    torch.manual_seed(0)
    return config, tf.LlamaForCausalLM(config).to(device).eval()


class PositionCacheAttention(torch.nn.Module):
    """One attention layer with gpt-fast's cache: buffers updated at the step's positions."""

    def __init__(self, device: str):
        super().__init__()
        hidden, _, heads, _, rows = SIZES[device]
        self.heads, self.width = heads, hidden // heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False)
        self.out = torch.nn.Linear(hidden, hidden, bias=False)
        self.register_buffer("keys", torch.zeros(1, heads, rows, self.width))
        self.register_buffer("values", torch.zeros(1, heads, rows, self.width))
        self.register_buffer("mask", torch.tril(torch.ones(rows, rows, dtype=torch.bool)))

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(1, -1, self.heads, self.width).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        self.keys[:, :, positions] = k
        self.values[:, :, positions] = v
        mask = self.mask[positions].view(1, 1, positions.numel(), -1)
        y = torch.nn.functional.scaled_dot_product_attention(q, self.keys, self.values, attn_mask=mask)
        return self.out(y.transpose(1, 2).reshape(1, -1, self.heads * self.width))


def _contender(module: torch.nn.Module, contender: str) -> Callable:
    if contender == "ours":  # torch.compile's default for sizes, as a user generating would ask (README)
        return cc.compile(module, dynamic=None)
    return torch.compile(module) if contender == "inductor" else module


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _median_ms(step: Callable[[], None], device: str, samples: int) -> float:
    times = []
    for _ in range(samples):
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _llama_row(cache_kind: str, device: str, contender: str, samples: int) -> tuple[float, torch.Tensor]:
    config, model = _llama(device)
    rows = SIZES[device][4]
    forward = _contender(model, contender)
    if cache_kind == "static":
        cache = tf.StaticCache(config=config, max_cache_len=rows)
    else:
        cache = tf.DynamicCache(config=config)
    prompt = torch.randint(3, 1000, (1, 16), generator=torch.Generator().manual_seed(1)).to(device)
    tokens = [prompt]
    with torch.no_grad():
        current = forward(input_ids=prompt, **{CACHE_ARG: cache}, use_cache=True).logits[:, -1:].argmax(-1)
        for _ in range(8):  # warm-up steps, their tokens checked
            tokens.append(current)
            current = forward(input_ids=current, **{CACHE_ARG: cache}, use_cache=True).logits[:, -1:].argmax(-1)
        state = {"current": current}

        def step() -> None:
            state["current"] = forward(input_ids=state["current"], **{CACHE_ARG: cache},
                                       use_cache=True).logits[:, -1:].argmax(-1)

        ms = _median_ms(step, device, samples)
    return ms, torch.cat(tokens, 1).cpu()


def _position_row(device: str, contender: str, samples: int) -> tuple[float, torch.Tensor]:
    torch.manual_seed(0)
    layer = PositionCacheAttention(device).to(device)
    forward = _contender(layer, contender)
    hidden = SIZES[device][0]
    x = torch.randn(1, 16, hidden, generator=torch.Generator().manual_seed(2)).to(device)
    with torch.no_grad():
        outputs = [forward(x, torch.arange(16, device=device))]
        state = {"position": 16}
        one = x[:, :1].contiguous()

        def step() -> None:
            outputs.append(forward(one, torch.tensor([state["position"]], device=device)))
            state["position"] += 1

        for _ in range(8):
            step()
        check = torch.cat([o[:, -1] for o in outputs], 0).cpu()
        ms = _median_ms(step, device, samples)
    return ms, check


ROWS = {
    "llama_static_cache": lambda device, contender, samples: _llama_row("static", device, contender, samples),
    "llama_dynamic_cache": lambda device, contender, samples: _llama_row("dynamic", device, contender, samples),
    "position_cache_attention": _position_row,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=sorted(SIZES))
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--only", help="comma-separated rows")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    tf.logging.set_verbosity_error()
    results = []
    for name, row in ROWS.items():
        if args.only and name not in args.only.split(","):
            continue
        times, checks = {}, {}
        for contender in ("eager", "ours", "inductor"):
            torch._dynamo.reset()
            times[contender], checks[contender] = row(args.device, contender, args.samples)
        exact = name.startswith("llama")  # greedy tokens: equal; the layer's outputs: close
        ok = all(torch.equal(checks[c], checks["eager"]) if exact else
                 torch.allclose(checks[c], checks["eager"], rtol=1e-3, atol=1e-4) for c in ("ours", "inductor"))
        results.append({"row": name, "device": args.device, "ok": ok, **{f"{c}_ms": t for c, t in times.items()},
                        "ours_over_inductor": times["ours"] / times["inductor"]})
        print(f"{name:26s} eager {times['eager']:7.3f} ms  ours {times['ours']:7.3f} ms  inductor "
              f"{times['inductor']:7.3f} ms  ours/inductor {times['ours'] / times['inductor']:.2f}  "
              f"{'ok' if ok else 'MISMATCH'}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sizes": SIZES[args.device], "torch": torch.__version__, "rows": results}, f, indent=1)


if __name__ == "__main__":
    main()
