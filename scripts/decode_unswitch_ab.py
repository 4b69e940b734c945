"""A/B of the C++ kernels' per-row branch (codegen/cpp/kernel.py, _unswitch_condition) on Llama decode
with transformers' DynamicCache, in one process: the same model compiled with the branch and with it
turned off (every where a blend), alternating, each timed over decode steps after a prompt.

    PYTHONPATH=. python scripts/decode_unswitch_ab.py --prompt 512 --steps 40 --rounds 2

Prints, per round and side, the median and the fastest step time (after the first quarter of the
steps) and how many kernels branch. On a shared 2-core machine one thread gives steadier figures."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers as tf

sys.path.insert(0, str(Path(__file__).parent))
import decode_bench as bench  # noqa: E402

import compiler_core as cc  # noqa: E402
from compiler_core.codegen.cpp import kernel  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens (the cache's first rows)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, help="torch's (and the kernels') threads; default: torch's")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tf.logging.set_verbosity_error()
    config, model = bench._llama("cpu")
    branching = kernel._unswitch_condition

    def run(branch: bool) -> tuple[float, float, int]:
        kernel._unswitch_condition = branching if branch else (lambda values, names: None)
        torch._dynamo.reset()
        forward = cc.compile(model, dynamic=None)
        cache = tf.DynamicCache(config=config)
        current = torch.randint(3, 1000, (1, args.prompt), generator=torch.Generator().manual_seed(1))
        times = []
        with torch.no_grad():
            for _ in range(args.steps):
                start = time.perf_counter()
                logits = forward(input_ids=current, **{bench.CACHE_ARG: cache}, use_cache=True).logits
                current = logits[:, -1:].argmax(-1)
                times.append(time.perf_counter() - start)
        source = "\n".join(k.source for g in forward.session.graphs for k in g.kernels)
        kept = times[args.steps // 4:]
        return statistics.median(kept) * 1e3, min(kept) * 1e3, source.count("} else {")

    print(f"Llama decode, DynamicCache, CPU, {torch.get_num_threads()} threads: prompt {args.prompt}, "
          f"{args.steps} steps")
    for round_ in range(args.rounds):
        for branch in (True, False):
            median, fastest, branches = run(branch)
            print(f"round {round_}  branch per row {'on ' if branch else 'off'}  median {median:.3f} ms a step, "
                  f"fastest {fastest:.3f}  ({branches} kernels branch)", flush=True)


if __name__ == "__main__":
    main()
