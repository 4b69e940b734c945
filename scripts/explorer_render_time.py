"""How long the explorer takes to render a GPT-2 (the zoo's small one), view by view.

    PYTHONPATH=. python scripts/explorer_render_time.py          # inference
    PYTHONPATH=. python scripts/explorer_render_time.py --train  # forward and backward graphs

Prints the compile time, the size of every graph, the time to show the view as a notebook does (widget
and static fallback), then each view's render time and HTML size. Times on a shared machine move with
its load.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, "tests")  # run from the repository root: the zoo lives in tests/models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", action="store_true", help="explore a training step (forward and backward)")
    train = parser.parse_args().train

    from models.zoo import ZOO

    from explorer import explore
    from explorer.views import VIEWS

    case = ZOO["gpt2"].build("small", "cpu", torch.float32, mask=True)
    model = case.model.train() if train else case.model
    ids, mask, labels = (case.inputs[k] for k in ("input_ids", "attention_mask", "labels"))

    def step(ids, mask, labels):
        out = model(input_ids=ids, attention_mask=mask, labels=labels if train else None)
        return case.loss(out) if train else out.logits

    start = time.perf_counter()
    view = explore(step, ids, mask, labels, train=train, repeats=0, kernels_for=(), title="gpt2")
    print(f"compile: {time.perf_counter() - start:.2f} s")
    for record in view.session.all_records():
        prims = len(record.prims.graph_module.graph.nodes) if record.prims is not None else "-"
        kernels = len(record.schedule.groups) if record.schedule is not None else "-"
        print(f"  graph {record.captured.index} {record.part}: {len(record.captured.graph_module.graph.nodes)} "
              f"captured nodes, {prims} primitive nodes, {kernels} kernels and extern calls")
    # What a notebook does to show the view: the widget and the static fallback beside it.
    start = time.perf_counter()
    bundle = view._repr_mimebundle_()
    print(f"shown (widget and static HTML, {len(bundle['text/html']) / 1e6:.1f} MB): "
          f"{time.perf_counter() - start:.2f} s; load average {os.getloadavg()[0]:.1f}")
    print("each view again (text highlighting is cached by now):")
    for title, render in VIEWS:
        start = time.perf_counter()
        html = render(view.exploration)
        print(f"  {title:9s} {time.perf_counter() - start:5.2f} s {len(html) / 1e3:7.0f} kB")


if __name__ == "__main__":
    main()
