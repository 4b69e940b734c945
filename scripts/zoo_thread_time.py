"""Ours against Inductor on the CPU zoo's small models, on one thread, timed by the thread's CPU time.

    PYTHONPATH=. python scripts/zoo_thread_time.py resnet,gpt2,bert,llama,vit,t5 [--rounds 25] [--dtype bf16]

Why not the zoo table's wall clock: on the shared 2-core machine another job's load stalls two-thread
OpenMP regions for milliseconds, and the zoo's 10 samples of HF ResNet gave ours/Inductor anywhere from
0.42 to 1.51 at load 4 (2026-12-02). With one thread on each side and `time.thread_time()`, the time
another process holds the core is not counted, and the ratio repeats within a few percent for ResNet
(the transformer rows still move by about 5% between runs: cache effects of the other jobs remain).
Eager, ours and Inductor are sampled round-robin (20 calls a sample, one untimed call before each);
medians and quartiles in ms per call. Both compilers read the thread count when they compile, so it is
set first.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch

torch.set_num_threads(1)
os.environ.pop("FCOMPILE_DEBUG", None)  # times are of the program a user runs (tests/models/table.py)

import compiler_core as cc  # noqa: E402
from tests.models.zoo import ZOO  # noqa: E402

CALLS_PER_SAMPLE = 20


def _step(model, inputs):
    def call():
        with torch.no_grad():
            return model(**inputs)
    return call


def _sample_ms(fn) -> float:
    fn()
    start = time.thread_time()
    for _ in range(CALLS_PER_SAMPLE):
        fn()
    return (time.thread_time() - start) * 1e3 / CALLS_PER_SAMPLE


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", help="comma-separated zoo names")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    for name in args.models.split(","):
        case = ZOO[name].build("small", "cpu", dtype, mask=True)
        model = case.model.eval()
        fns = {"eager": _step(model, case.inputs), "ours": _step(cc.compile(copy.deepcopy(model)), case.inputs),
               "inductor": _step(torch.compile(copy.deepcopy(model)), case.inputs)}
        for fn in fns.values():
            for _ in range(CALLS_PER_SAMPLE):
                fn()
        samples: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(args.rounds):
            for k, fn in fns.items():
                samples[k].append(_sample_ms(fn))
        q = {k: statistics.quantiles(v, n=4, method="inclusive") for k, v in samples.items()}
        med = {k: statistics.median(v) for k, v in samples.items()}
        print(f"{name:8s} {args.dtype} eager {med['eager']:.3f} ms, "
              f"ours {med['ours']:.3f} ({q['ours'][0]:.3f}-{q['ours'][2]:.3f}), "
              f"Inductor {med['inductor']:.3f} ({q['inductor'][0]:.3f}-{q['inductor'][2]:.3f}), "
              f"ours/Inductor {med['ours'] / med['inductor']:.3f}, load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
