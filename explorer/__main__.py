"""Command line: standalone HTML reports and the headless tour.

    python -m explorer report path/to/script.py:fn --out report.html
    python -m explorer tour --out build/tour.html
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorer", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="explore one function and write a standalone HTML report")
    report.add_argument("target", help="path/to/script.py:fn; the script also defines `example_inputs` "
                                       "(a tuple of arguments, or a function returning one)")
    report.add_argument("--out", default="report.html", help="HTML file to write (default: report.html)")
    report.add_argument("--backend", choices=("auto", "cpp", "triton"), default="auto")
    report.add_argument("--train", action="store_true", help="compile and time forward + backward")
    report.add_argument("--repeats", type=int, default=10, help="timed runs of eager and ours (0: do not time)")
    report.add_argument("--kernels-for", default=None, metavar="BACKENDS",
                        help="comma-separated backends whose kernels to show (default: cpp,triton on CPU)")
    report.add_argument("--compare", choices=("inductor",), default=None, help="also time torch.compile")

    tour = commands.add_parser("tour", help="execute notebooks/00_tour.ipynb, export it, summarize the workloads")
    tour.add_argument("--out", default="build/tour.html", help="HTML file to write (default: build/tour.html)")
    tour.add_argument("--notebook", default=None, help="notebook to run (default: notebooks/00_tour.ipynb)")
    tour.add_argument("--no-summary", action="store_true", help="skip the workload summary table")
    tour.add_argument("--repeats", type=int, default=10, help="timed runs per workload in the summary")
    tour.add_argument("--timeout", type=int, default=600, help="seconds allowed per notebook cell")

    args = parser.parse_args(argv)
    if args.command == "report":
        return _report(args)
    from explorer.tour import run_tour

    try:
        run_tour(args.out, notebook=args.notebook, summary=not args.no_summary, timeout=args.timeout,
                 repeats=args.repeats)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _report(args: argparse.Namespace) -> int:
    from explorer.report import ReportError, write_report

    kernels_for = tuple(b.strip() for b in args.kernels_for.split(",")) if args.kernels_for else None
    print(f"explorer: compiling {args.target}", file=sys.stderr, flush=True)
    try:
        path = write_report(args.target, args.out, backend=args.backend, train=args.train,
                            kernels_for=kernels_for, repeats=args.repeats, compare=args.compare)
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"explorer: wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
