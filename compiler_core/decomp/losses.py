"""The negative log-likelihood's backward as a pointwise one-hot, so it fuses into log_softmax's backward.

torch's reference writes a zero tensor of the logits' size and scatters -1 at each target. In a
language model's training step that tensor is the largest of the step (tokens x vocabulary), and the
scatter would run in PyTorch, so the gradient went to memory twice before log_softmax's backward
read it. The same values as a comparison of each class with the row's target,

    grad[n, c] = -grad_output[n] * weight[c]   where c == target[n] != ignore_index,   else 0

are pure index arithmetic: the scheduler places them inside the kernel that reads them, and no
logits-sized gradient of the loss is ever stored. The arithmetic (the mean's division, the weight's
product, the sign) is eager's, in eager's order, so every value rounds as eager's does.
"""

from __future__ import annotations

from typing import Optional

import torch

aten = torch.ops.aten
MEAN = 1  # torch's Reduction enum: NONE 0, MEAN 1, SUM 2


def nll_loss_backward(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor,
                      weight: Optional[torch.Tensor], reduction: int, ignore_index: int,
                      total_weight: torch.Tensor) -> torch.Tensor:
    channel_dim = 0 if self.dim() < 2 else 1
    if reduction == MEAN:
        grad_output = grad_output / total_weight
    if self.dim() == 1 and target.dim() > 0:  # no batch dim: eager reads target[0] only
        target = target[0]
    target = target.unsqueeze(channel_dim)
    if self.dim() > grad_output.dim() > 0:
        grad_output = grad_output.unsqueeze(channel_dim)
    classes_shape = [1] * self.dim()
    classes_shape[channel_dim] = self.shape[channel_dim]
    if weight is not None:
        grad_output = grad_output * weight.reshape(classes_shape)
    classes = torch.arange(self.shape[channel_dim], device=self.device).view(classes_shape)
    hit = (classes == target) & (target != ignore_index)
    return torch.where(hit, -grad_output, 0).to(self.dtype)


def nll_loss2d_forward(self: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor], reduction: int,
                       ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy over (N, C, H, W) logits (segmentation heads): the (N*H*W, C) case of the 1-d loss,
    whose reference (a gather of each row's target) is in table.py's list."""
    if self.dim() != 4 or target.dim() != 3:
        return NotImplemented
    rows = self.permute(0, 2, 3, 1).reshape(-1, self.shape[1])
    out, total_weight = aten.nll_loss_forward(rows, target.reshape(-1), weight, reduction, ignore_index)
    return (out.reshape(target.shape) if reduction == 0 else out), total_weight


# The backward above takes the classes along dim 1 whatever the rank: (N, C, H, W) logits as (N, C).
LOSSES = {aten.nll_loss_backward.default: nll_loss_backward, aten.nll_loss2d_backward.default: nll_loss_backward,
          aten.nll_loss2d_forward.default: nll_loss2d_forward}
