"""Where a decode step's host time goes: cProfile of ours' steps on one row of scripts/decode_bench.py.

    PYTHONPATH=. python scripts/profile_decode_host.py --device cuda --row dynamic --steps 30

Prints the wall time per step (CUDA-synchronized), then the profile's top functions by their own time
and by cumulative time, so a launch-bound step shows which host work costs it."""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch
import transformers as tf

sys.path.insert(0, str(Path(__file__).parent))
import decode_bench as bench  # noqa: E402

import compiler_core as cc  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--row", choices=("static", "dynamic"), default="dynamic")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--contender", choices=("ours", "inductor"), default="ours")
    parser.add_argument("--kernels", action="store_true",
                        help="also time steps synchronized one by one and list the device's kernels (torch.profiler)")
    args = parser.parse_args()
    tf.logging.set_verbosity_error()
    config, model = bench._llama(args.device)
    forward = cc.compile(model, dynamic=None) if args.contender == "ours" else torch.compile(model)
    rows = bench.SIZES[args.device][4]
    cache = (tf.StaticCache(config=config, max_cache_len=rows) if args.row == "static"
             else tf.DynamicCache(config=config))
    current = torch.randint(3, 1000, (1, 16), generator=torch.Generator().manual_seed(1)).to(args.device)

    def step() -> None:
        nonlocal current
        current = forward(input_ids=current, **{bench.CACHE_ARG: cache}, use_cache=True).logits[:, -1:].argmax(-1)

    with torch.no_grad():
        for _ in range(10):
            step()
        bench._sync(args.device)
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        bench._sync(args.device)
        print(f"{args.contender} {args.row}: {(time.perf_counter() - start) / args.steps * 1e3:.3f} ms a step "
              f"(unsynchronized between steps)")
        if args.kernels:
            _synchronized_and_kernels(step, args)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.steps):
            step()
        bench._sync(args.device)
        profile.disable()
    if args.contender == "ours":
        s = forward.session
        print("graphs", len(s.graphs), "breaks", len(s.breaks), "kernels", s.stats.get("kernel_count"),
              "symbolic", [g.symbolic for g in s.graphs])
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(25)
        print(text.getvalue()[-6000:])


def _synchronized_and_kernels(step, args) -> None:
    """A step timed alone (synchronized before and after, as decode_bench.py times it), then the device's
    kernels over the steps by their total time: unsynchronized steps overlap host and device work, so the
    two times differ by what the device does after the host is done (or waits for)."""
    times = []
    for _ in range(args.steps):
        bench._sync(args.device)
        start = time.perf_counter()
        step()
        bench._sync(args.device)
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    print(f"{args.contender} {args.row}: {times[len(times) // 2]:.3f} ms a step, synchronized (median)")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if args.device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        bench._sync(args.device)
    sort = "self_cuda_time_total" if args.device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=30, max_name_column_width=60))


if __name__ == "__main__":
    main()
