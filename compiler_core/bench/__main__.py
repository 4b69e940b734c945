"""Command line of the benchmark: table on stdout, progress on stderr, rows as JSON with --json."""

from __future__ import annotations

import argparse
import json
import os
import sys

from compiler_core.bench.runner import BenchOptions, format_table, run
from compiler_core.bench.workloads import SIZES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compiler_core.bench", description=__doc__)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--json", metavar="FILE", help="write the report (ARCHITECTURE.md's schema) here")
    parser.add_argument("--only", metavar="NAME,...", default="", help="comma-separated workload names")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timing samples per contender (default: 15 on CPU, 50 on CUDA)")
    parser.add_argument("--size", choices=SIZES, default="full",
                        help="full: TARGETS.md sizes; small: tiny shapes for smoke tests")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile/Inductor (null fields)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when ours raised or did not match eager on any workload")
    args = parser.parse_args(argv)

    options = BenchOptions(device=args.device, size=args.size, repeats=args.repeats,
                           only=tuple(n.strip() for n in args.only.split(",") if n.strip()),
                           inductor=not args.no_inductor)
    report = run(options)
    print(format_table(report), flush=True)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        print(f"[bench] wrote {args.json}", file=sys.stderr)
    failed = [r["workload"] for r in report["rows"] if r.get("ours_error") or r.get("matches_eager") is False]
    return 1 if args.strict and failed else 0


if __name__ == "__main__":
    sys.exit(main())
