"""Every stage's artifact of one benchmark workload, compiled as the bench compiles it, written to files.

    PYTHONPATH=. python scripts/explain_workload.py gpt_block --device cuda --out build/explain

Per graph (forward, and backward when training): the partition, the schedule with its decision log,
the memory plan and every kernel's source, one file each under --out/<workload>/. For reading on
this machine what the GPU machine decided (its graphs differ from the CPU's: cuDNN attention, the
device's decompositions).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import compiler_core as cc
from compiler_core.bench.runner import _step
from compiler_core.bench.workloads import WORKLOADS
from compiler_core.compare import inductor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--size", default="full", choices=("full", "small"))
    parser.add_argument("--out", default="build/explain")
    opts = parser.parse_args()
    w = WORKLOADS[opts.workload]
    args = w.make_inputs(opts.device, opts.size)
    compiled = cc.compile(inductor.private_copy(w.fn))
    _step(w, compiled, args)()
    out = Path(opts.out) / opts.workload
    out.mkdir(parents=True, exist_ok=True)
    for record in compiled.session.all_records():
        stem = f"graph{record.captured.index}-{record.part}"
        parts = {"partition": record.partition, "schedule": record.schedule, "memory": record.memory}
        for name, artifact in parts.items():
            if artifact is not None:
                (out / f"{stem}-{name}.txt").write_text(artifact.pretty())
        (out / f"{stem}-kernels.txt").write_text("\n\n".join(f"# ==== {k.name} grid {k.grid}\n{k.source}"
                                                            for k in record.kernels))
        print(f"{stem}: {len(record.kernels)} kernels", "(fell back: " + record.fallback_reason + ")"
              if record.fell_back else "")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
