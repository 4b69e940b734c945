"""`python -m tests.models`: the model-zoo table, ours vs eager and vs Inductor, per model and mode.

    python -m tests.models --device cuda --dtype fp32,bf16 --json zoo-cuda.json   # realistic sizes
    python -m tests.models --device cpu --size small --only gpt2,bert              # the CPU tests' sizes

Run from the repository root (so `tests` and this checkout's `compiler_core` are importable).
Progress goes to stderr as each row finishes; notes (errors, fallbacks) and then the table are printed
last, on stdout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

# Before compiler_core is imported, as in the tests: memory checking on unless the caller chose.
os.environ.setdefault("FCOMPILE_DEBUG", "memory")

import torch  # noqa: E402

from .beyond import BEYOND  # noqa: E402
from .table import DTYPES, format_notes, format_table, zoo_row  # noqa: E402
from .zoo import EXTRA, ZOO  # noqa: E402

MODES = ("inference", "training")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.models", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="fp32", help="comma-separated: fp32,bf16")
    parser.add_argument("--size", choices=("small", "large"), help="default: large on cuda, small on cpu")
    parser.add_argument("--only", help="comma-separated model names (default: the zoo and its extras); "
                        "'beyond' adds the 20 architectures of tests/models/beyond.py")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: inference,training")
    parser.add_argument("--mask", choices=("both", "with", "without"), default="both",
                        help="for models with an attention mask")
    parser.add_argument("--repeats", type=int, help="timed samples per contender (0: no timing; default 10, and 0 "
                        "with --check, whose per-kernel comparisons would be timed too)")
    parser.add_argument("--no-inductor", action="store_true", help="time eager and ours only (Inductor's "
                        "compile of a large model takes minutes)")
    parser.add_argument("--check", action="store_true", help="compile with check=True: every kernel is compared "
                        "with eager PyTorch on its own inputs as it runs, and a row whose kernel disagrees is "
                        "a mismatch naming that kernel (slower; catches a kernel built wrong even where the "
                        "model's outputs happen to pass)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.check and args.repeats:
        parser.error("--check times every kernel's comparison with eager too: its timings would mean nothing. "
                     "Run --check without --repeats (or --repeats 0), and time in a separate run.")
    if args.repeats is None:
        args.repeats = 0 if args.check else 10
    # fp32 rows compare against fp32 eager: TF32 convolutions (cuDNN's default) round their inputs to
    # 10 mantissa bits, so a last-bit difference upstream shows as 1e-3 in a gradient. Off for all.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    # cuDNN's default convolution backward algorithms accumulate with atomics, so two runs of one
    # model differ: in a deep fp32 backward one weight gradient of ours was 4.1e-5 off fp64 in one run
    # and 1.7e-5 in the next (eager: 1.2e-5). Deterministic algorithms make a row's verdict repeatable.
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False

    size = args.size or ("large" if args.device == "cuda" else "small")
    entries = {**ZOO, **EXTRA, **BEYOND}
    # Default: the zoo and the torchvision/timm extras. "beyond" names the sweep's 20 other architectures.
    names = args.only.split(",") if args.only else [*ZOO, *EXTRA]
    names = [n for name in names for n in (BEYOND if name == "beyond" else [name])]
    unknown = [n for n in names if n not in entries]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(entries)}")
    dtypes = [DTYPES[d] for d in args.dtype.split(",")]
    modes = args.modes.split(",")
    masks = {"both": (True, False), "with": (True,), "without": (False,)}[args.mask]

    rows = []
    for name in names:
        entry = entries[name]
        for dtype in dtypes:
            for mask in masks if entry.takes_mask else (None,):
                for mode in modes:
                    row = zoo_row(entry, size, args.device, dtype, mask, mode, args.repeats,
                                  inductor=not args.no_inductor,
                                  options={"check": True} if args.check else None)
                    rows.append(row)
                    print(f"[zoo] {name} {row['dtype']} {row['mask']} {mode}: {row['status']}"
                          f" {row.get('note') or ''}", file=sys.stderr, flush=True)
                    if args.json:  # after every row: a run stopped at a time limit keeps what it measured
                        _write_json(args.json, args.device, size, rows)
    notes = format_notes(rows)
    if notes:
        print(notes + "\n")
    print(format_table(rows))
    return 0


def _write_json(path: str, device: str, size: str, rows: list[dict]) -> None:
    machine = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    with open(path, "w") as f:
        json.dump({"device": device, "machine": machine, "date": datetime.date.today().isoformat(),
                   "torch": torch.__version__, "transformers": _version("transformers"), "size": size,
                   "rows": rows}, f, indent=1)


def _version(package: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(package)
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    sys.exit(main())
