"""The compiled optimizer step on a GPU: SGD (momentum), Adam, AdamW through eager PyTorch (foreach),
Inductor and fcompile. Run on the GPU machine from the repository root:

    PYTHONPATH=$PWD python tools/gpu_checks/optimizer_step.py [--layers 6] [--width 1024]

(`--device cpu --layers 1 --width 16` runs the same checks on the CPU, to try the script itself.)

Prints one table: our kernels and extern calls per step (from the session), how many updated
parameters and state tensors our kernels write in place (AOTAutograd's copy back into the input is
then a copy onto itself, no kernel), CUDA kernels launched per step as the profiler counts them,
median step time, and the ratios to eager and Inductor. Exits non-zero when parameters or optimizer
state after three steps differ from eager, or a graph fell back.
"""

from __future__ import annotations

import argparse
import copy
import sys

import torch

import compiler_core as cc
from compiler_core.bench.timing import time_interleaved
from compiler_core.compare.inductor import compile_with_inductor

OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.01, "momentum": 0.9}),
    "adam": (torch.optim.Adam, {"lr": 1e-3}),
    "adamw": (torch.optim.AdamW, {"lr": 1e-3, "weight_decay": 0.01}),
}


def make_model(layers: int, width: int, device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                   torch.nn.Linear(4 * width, width)]
    return torch.nn.Sequential(*blocks).to(device)


def set_grads(model: torch.nn.Module, seed: int) -> None:
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, device=device, generator=gen) * 1e-2


def snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    # Step counters may live on the CPU (capturable=False) in one run and on the GPU in another.
    out = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        out += [torch.as_tensor(v).detach().clone().to(p.device) for v in opt.state[p].values()]
    return out


def kernels_launched(step, device: str) -> int | None:
    """CUDA kernels (and memcpy/memset) one call of `step` launches, or None if not measured."""
    if device != "cuda":
        return None
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        return sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception as exc:  # noqa: BLE001 - the count is informative only
        print(f"  (profiler failed: {exc})")
        return None


def run(kind: str, layers: int, width: int, repeats: int, device: str) -> tuple[dict, bool]:
    cls, kwargs = OPTIMIZERS[kind]
    # Dynamo guards torch.optim's step wrapper on the optimizer object and shares one recompile limit
    # between backends: past it the step runs in eager PyTorch. Start each optimizer from a clean cache.
    torch._dynamo.reset()
    base = make_model(layers, width, device)
    runs: dict[str, tuple] = {}
    for name in ("eager", "inductor", "ours"):
        model = copy.deepcopy(base)
        opt = cls(model.parameters(), **kwargs)

        def step(opt=opt):
            opt.step()

        fn = step if name == "eager" else compile_with_inductor(step) if name == "inductor" else cc.compile(step)
        for i in range(3):
            set_grads(model, seed=i)
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        runs[name] = (model, opt, fn, snapshot(model, opt))
    ok = True
    reference = runs["eager"][3]
    for name in ("inductor", "ours"):
        got = runs[name][3]
        worst = max(((a - b).abs() / (b.abs() + 1e-6)).max().item() for a, b in zip(got, reference))
        same = len(got) == len(reference) and all(torch.allclose(a, b, rtol=1e-4, atol=1e-5)
                                                 for a, b in zip(got, reference))
        if not same:  # Inductor's mismatch is shown; only ours fails the check
            print(f"MISMATCH {kind} {name}: worst relative difference {worst:.3g}")
            ok = ok and name != "ours"
    session = runs["ours"][2].session
    stats = session.stats
    if stats["fallback_graphs"] or stats["fallback_ops"] or not stats["kernel_count"]:
        print(f"FALLBACK or NOT COMPILED {kind}: {stats} {session.messages}")
        ok = False
    launched = {name: kernels_launched(runs[name][2], device) for name in runs}
    times = time_interleaved({name: runs[name][2] for name in runs}, device, repeats)
    in_place = sum(len(g.memory.inplace) for g in session.graphs if g.memory is not None)
    row = {"optimizer": kind, "params": sum(1 for _ in base.parameters()),
           "ours_kernels": stats["kernel_count"], "ours_externs": stats["extern_calls"], "in_place": in_place,
           **{f"{n}_launches": launched[n] for n in runs}, **{f"{n}_ms": times[n] for n in runs}}
    return row, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (or --device cpu)")
        return 2
    machine = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {machine}, {args.layers} blocks of width {args.width}")
    header = ("optimizer", "params", "ours_kernels", "ours_externs", "in_place", "eager_launches", "inductor_launches",
              "ours_launches", "eager_ms", "inductor_ms", "ours_ms", "eager/ours", "inductor/ours")
    print(" | ".join(header))
    all_ok = True
    for kind in OPTIMIZERS:
        row, ok = run(kind, args.layers, args.width, args.repeats, args.device)
        all_ok &= ok
        row["eager/ours"] = row["eager_ms"] / row["ours_ms"]
        row["inductor/ours"] = row["inductor_ms"] / row["ours_ms"]
        print(" | ".join(f"{row[h]:.3f}" if isinstance(row[h], float) else str(row[h]) for h in header))
    print("OK" if all_ok else "FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
