"""`python -m explorer report script.py:fn --out report.html`: one program's explorer as a standalone page.

The script defines `fn` and `example_inputs`: a tuple of arguments, or a function returning one.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from explorer.exploration import explore_function
from explorer.view import ExplorerView


class ReportError(Exception):
    """The script or function named on the command line cannot be used; the message says why."""


def load_target(target: str) -> tuple[Callable, tuple, str]:
    """'path/to/script.py:fn' -> (fn, example inputs, title). The script runs as a module, not as __main__."""
    path_text, _, name = target.rpartition(":")
    if not path_text or not name:
        raise ReportError(f"{target!r}: name the function too, as path/to/script.py:fn")
    path = Path(path_text)
    if not path.is_file():
        raise ReportError(f"{path}: no such file")
    namespace = runpy.run_path(str(path), run_name="__fcompile_report__")
    if name not in namespace or not callable(namespace[name]):
        raise ReportError(f"{path} defines no function {name!r}")
    if "example_inputs" not in namespace:
        raise ReportError(f"{path} must define `example_inputs`: a tuple of arguments for {name}, "
                          "or a function returning one")
    inputs = namespace["example_inputs"]
    inputs = inputs() if callable(inputs) else inputs
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)  # a single tensor is a one-argument call
    return namespace[name], tuple(inputs), f"{path.name}:{name}"


def write_report(target: str, out: str | Path, *, backend: str = "auto", train: bool = False,
                 kernels_for: Optional[Sequence[str]] = None, repeats: int = 10, compare: Any = None) -> Path:
    fn, inputs, title = load_target(target)
    exploration = explore_function(fn, inputs, backend=backend, train=train, kernels_for=kernels_for,
                                   repeats=repeats, compare=compare, title=title)
    return ExplorerView(exploration).to_html(out)
