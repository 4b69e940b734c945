"""torch references that compute another result than eager's, replaced by correct ones while we trace.

Some of torch's Python references are installed above autograd (`py_impl(DispatchKey.Autograd)`), so
every graph AOTAutograd traces takes them before any decomposition table is asked: ours cannot replace
them by listing an op. One of them is wrong:

- `multilabel_margin_loss_forward`: a row's target classes end at its first -1, and the reference
  masks the classes after it to index 0 but still adds their hinge terms, each 1 - x[0] + x[k]: a row
  `[1, 3, -1, 0, ...]` counts class 0 four more times, and a row starting with -1 (no class at all,
  loss 0 in eager) gets a loss. Inductor gives the same wrong values (torch 2.13, 2026-12-04); the
  OpInfo samples have no -1, so its tests do not see it.

`corrected_references()` swaps our versions in for the duration of one AOTAutograd call and restores
torch's afterwards, so nothing outside our compiler changes. Autograd differentiates ours as it did
torch's.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from compiler_core import _compat

aten = torch.ops.aten


def multilabel_margin_loss_forward(input: torch.Tensor, target: torch.Tensor,
                                   reduction: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's loss: per row, the mean over classes k not among the row's targets of
    max(0, 1 - x[j] + x[k]), summed over the targets j before the first -1; and whether each class is
    a target."""
    shape = input.shape
    x, labels = torch.atleast_2d(input), torch.atleast_2d(target)
    classes = x.shape[1]
    position = torch.arange(classes, device=x.device)
    end = torch.where(labels == -1, position, classes).amin(-1, keepdim=True)
    listed = position < end  # [N, J]: target slot j holds a class
    label = torch.where(listed, labels, 0)
    is_target = ((position.view(1, 1, classes) == label.unsqueeze(-1)) & listed.unsqueeze(-1)).any(1)  # [N, K]
    at_label = x.gather(-1, label)  # [N, J]
    hinge = (1.0 - at_label.unsqueeze(-1) + x.unsqueeze(1)).clamp_min(0) / classes  # [N, J, K]
    hinge = torch.where(listed.unsqueeze(-1) & ~is_target.unsqueeze(1), hinge, 0.0)
    per_row = hinge.sum((1, 2))
    if reduction == 1:
        loss = per_row.mean()
    elif reduction == 2:
        loss = per_row.sum()
    else:
        loss = per_row if len(shape) == 2 else per_row.reshape(())
    return loss, is_target.to(input.dtype).reshape(target.shape)


CORRECTED = {aten.multilabel_margin_loss_forward.default: multilabel_margin_loss_forward}


@contextlib.contextmanager
def corrected_references() -> Iterator[None]:
    saved = {}
    try:
        for op, fn in CORRECTED.items():
            saved[op] = _compat.set_autograd_kernel(op, fn)
        yield
    finally:
        for op, kernel in saved.items():
            _compat.set_autograd_kernel(op, kernel)
