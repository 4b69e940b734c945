"""Data-dependent assertions (`aten._assert_async`) kept as calls our host program makes.

`F.one_hot` checks that every class index is in range, `torch._assert_async(cond, msg)` in user code
checks anything: the graph holds `_assert_async.msg(cond, msg)`, which returns nothing. Our lowering
gives every extern call an output buffer, so the op becomes `fcompile::assert_async(cond, msg)`: it
calls `torch._assert_async` (eager's own check: on the CPU it raises eager's RuntimeError with eager's
message at once, on CUDA it is the same asynchronous device assertion as eager's) and returns an empty
tensor nobody reads. The condition itself (a min, a max, a comparison) is computed by our kernels.

It is marked as having a side effect, so no dead-code pass drops it for having no readers: the whole
graph used to run in eager PyTorch for want of a lowering ("extern _assert_async returns no tensor").
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


@torch.library.custom_op("fcompile::assert_async", mutates_args=())
def assert_async_op(cond: torch.Tensor, msg: str) -> torch.Tensor:
    torch._assert_async(cond, msg)
    return cond.new_empty((0,))


@assert_async_op.register_fake
def _(cond, msg):
    return cond.new_empty((0,))


torch.fx.node.has_side_effect(torch.ops.fcompile.assert_async.default)


def _assert_async_msg(cond: torch.Tensor, msg: str) -> None:
    assert_async_op(cond, msg)


def _assert_async(cond: torch.Tensor) -> None:
    # eager's message for the form without one
    assert_async_op(cond, "Expected Tensor with single nonzero value, but got zero")


ASSERTS = {aten._assert_async.msg: _assert_async_msg, aten._assert_async.default: _assert_async}
