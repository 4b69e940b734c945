"""`python -m compiler_core.bench`: eager PyTorch vs Inductor vs compiler_core on the standard workloads.

    python -m compiler_core.bench --device cpu --json benchmarks/results-cpu-2026-11-29.json
    python -m compiler_core.bench --device cuda --only softmax,rmsnorm --repeats 100

workloads.py  the programs and their sizes (TARGETS.md)
timing.py     the timing loops (CUDA events / perf_counter), copy bandwidth, CUDA peak memory
runner.py     one process runs all three contenders per workload -> rows; the printed table
__main__.py   the command line
"""

from compiler_core.bench.runner import BenchOptions, format_table, run
from compiler_core.bench.workloads import WORKLOADS

__all__ = ["BenchOptions", "WORKLOADS", "format_table", "run"]
