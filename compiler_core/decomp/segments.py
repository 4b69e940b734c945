"""Segment reductions (segment_reduce) and embedding bags (_embedding_bag, _embedding_bag_forward_only,
and the max_norm renormalisation F.embedding_bag does first) as masked reductions.

A segment is a run of consecutive elements: element j of a row belongs to segment s when

    start[s] <= j < end[s]      (start, end: the offsets, or the running sum of the lengths)

so segment s reduces over j of where(member[j, s], x[j], identity), the [elements x segments] square
our kernels compute without storing, as the scatter family does (scatter_family.py). An embedding bag
is the same over the rows its indices gather. The work is elements x segments: above SHORT_SCATTER
the op stays PyTorch's.

Each op matches ATen's CPU kernel, which this module follows case by case (the embedding bags are
decomposed for CPU tensors only):
- segment_reduce starts from `initial` (or sum 0, prod 1, max -inf, min +inf) and takes the elements
  one after another in the data's own dtype; a mean divides that by the length, and an empty segment's
  mean is `initial`, or NaN without one. Max and min are NaN when any element (or `initial`) is.
  fp32/fp64 sums and products are ours in the reduction's order (the same within rounding); fp16/bf16
  ones round after every element in eager (3000 fp16 ones sum to 2048), so ours take the same steps,
  one pointwise step per element, for axes of up to SHORT_STEPWISE elements.
- an embedding bag sums in fp32 for fp16/bf16 and rounds once (to nearest even: on its fast path
  ATen's x86 build rounds a bf16 tie away from zero instead, one ulp apart where the fp32 sum lies
  exactly between two bf16 values); a mean divides by the bag's size without its padding_idx entries
  (at least 1, so an empty bag gives 0). Max keeps a bag's first entry and replaces it by every later
  one that is greater, so a NaN counts only as the first entry.
  The three other outputs (offset2bag, bag_size, max_indices) are what ATen returns, which
  _embedding_bag's backward reads: offset2bag is empty on ATen's fast sum path, bag_size and
  max_indices are zeros for a sum.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from compiler_core.decomp.checks import raise_unless
from compiler_core.decomp.scans import extreme_identity
from compiler_core.decomp.scatter_family import SHORT_SCATTER

aten = torch.ops.aten
SHORT_STEPWISE = 16  # elements along the axis of an fp16/bf16 segment sum or product, at most
_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_INDEX_DTYPES = (torch.int32, torch.int64)
MODE_SUM, MODE_MEAN, MODE_MAX = 0, 1, 2


# ---------------------------------------------------------------------------------------------------
# segment_reduce


def segment_reduce(data: torch.Tensor, reduce: str, *, lengths: Optional[torch.Tensor] = None,
                   indices: Optional[torch.Tensor] = None, offsets: Optional[torch.Tensor] = None,
                   axis: int = 0, unsafe: bool = False, initial: Any = None) -> Any:
    """data [outer..., N, inner...] and lengths [outer..., S] (or offsets [outer..., S + 1]) along
    `axis` -> [outer..., S, inner...], e.g. segment_reduce(tensor([1., 2, 3]), "sum",
    lengths=tensor([2, 0, 1])) == tensor([3., 0, 3])."""
    bounds = lengths if lengths is not None else offsets
    if indices is not None or bounds is None or reduce not in ("sum", "mean", "max", "min", "prod"):
        return NotImplemented
    if data.dtype not in _FLOATS or bounds.dtype not in _INDEX_DTYPES or data.dim() == 0:
        return NotImplemented
    if not all(isinstance(s, int) for s in (*data.shape, *bounds.shape)):  # symbolic sizes: PyTorch's call
        return NotImplemented
    axis = axis % data.dim()
    if bounds.dim() != axis + 1 or tuple(bounds.shape[:axis]) != tuple(data.shape[:axis]):
        return NotImplemented
    size, count = data.shape[axis], bounds.shape[axis] - (0 if lengths is not None else 1)
    if size == 0 or count <= 0 or data.numel() * count > SHORT_SCATTER:
        return NotImplemented
    stepwise = data.dtype in _LOW_PRECISION and reduce in ("sum", "mean", "prod")
    if stepwise and size > SHORT_STEPWISE:
        return NotImplemented
    starts, ends = _segment_bounds(lengths, offsets, size, unsafe)
    inner = [1] * (data.dim() - axis - 1)
    length = (ends - starts).reshape(*starts.shape, *inner)  # [outer..., S, 1...]
    if stepwise:
        total = _stepwise(data, axis, starts, ends, reduce, initial)
    else:
        j = torch.arange(size, device=data.device).unsqueeze(-1)  # [N, 1]
        member = (starts.unsqueeze(-2) <= j) & (j < ends.unsqueeze(-2))  # [outer..., N, S]
        member = member.reshape(*member.shape, *inner)
        total = _masked_reduce(data.unsqueeze(axis + 1), member, axis, reduce, initial)
    if reduce != "mean":
        return total
    empty = float("nan") if initial is None else total  # an empty segment's total is `initial`
    if stepwise:  # ATen's Half / int64: the length rounded to the dtype, then divided
        mean = (total.float() / length.to(data.dtype).float()).to(data.dtype)
    else:
        mean = total / length
    return torch.where(length == 0, empty, mean)


def _segment_bounds(lengths: Optional[torch.Tensor], offsets: Optional[torch.Tensor], size: int,
                    unsafe: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(starts, ends) [outer..., S], int64, checked as ATen checks them: no segment of negative length,
    and without `unsafe` every row of lengths sums to the axis' size."""
    if lengths is not None:
        lengths = lengths.to(torch.int64)
        ends = torch.cumsum(lengths, -1)
        starts = ends - lengths
        valid = lengths >= 0
        if not unsafe:
            valid = valid & (lengths.sum(-1, keepdim=True) == size)
    else:
        offsets = offsets.to(torch.int64)
        starts, ends = offsets[..., :-1], offsets[..., 1:]
        valid = ends >= starts
    return starts, ends + raise_unless(valid)


def _masked_reduce(x: torch.Tensor, member: torch.Tensor, axis: int, reduce: str, initial: Any) -> torch.Tensor:
    """Reduce over `axis` of where(member, x, identity), then combine with `initial` as the first
    element: x [..., N, 1, ...] and member [..., N, S, ...] -> [..., S, ...]."""
    if reduce in ("sum", "mean"):
        total = torch.where(member, x, 0).sum(axis)
        return total if initial is None else total + initial
    if reduce == "prod":
        total = torch.where(member, x, 1).prod(axis)
        return total if initial is None else total * initial
    kind = reduce  # "max" or "min": NaN propagates, as ATen's NaN test before each compare does
    rows = torch.where(member, x, extreme_identity(x.dtype, kind))
    total = rows.amax(axis) if kind == "max" else rows.amin(axis)
    if initial is None:
        return total
    start = torch.full((), initial, dtype=x.dtype, device=x.device)
    return torch.maximum(total, start) if kind == "max" else torch.minimum(total, start)


def _stepwise(data: torch.Tensor, axis: int, starts: torch.Tensor, ends: torch.Tensor, reduce: str,
              initial: Any) -> torch.Tensor:
    """An fp16/bf16 segment sum or product as ATen's loop computes it: from `initial` (rounded to the
    dtype), one element at a time, each step computed in fp32 and rounded to the dtype."""
    dtype, inner = data.dtype, [1] * (data.dim() - axis - 1)
    shape = list(data.shape)
    shape[axis] = starts.shape[-1]
    start = initial if initial is not None else (1 if reduce == "prod" else 0)
    # built in fp32 and cast, so the start is rounded to the dtype even where the kernel fuses it
    # (a fused fp16 constant stays an fp32 literal)
    total = torch.full(shape, start, dtype=torch.float32, device=data.device).to(dtype)
    # Outside its segment an element steps by the exact no-op (x * 1, x + -0.0 keep every x, -0.0 and
    # NaN included), so each step reads the running total once: a where(here, step, total) would read it
    # twice, and the fused kernel's expression would double with every element.
    unchanged = 1.0 if reduce == "prod" else -0.0
    for j in range(data.shape[axis]):
        here = ((starts <= j) & (j < ends)).reshape(*starts.shape, *inner)
        x = torch.where(here, data.narrow(axis, j, 1).float(), unchanged)
        total = (total.float() * x if reduce == "prod" else total.float() + x).to(dtype)
    return total


# ---------------------------------------------------------------------------------------------------
# embedding bags


def _embedding_bag(for_backward: bool):
    """_embedding_bag (for_backward: its outputs feed the backward) or _embedding_bag_forward_only:
    (output, offset2bag, bag_size, max_indices) as ATen's CPU kernel returns them."""

    def op(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, scale_grad_by_freq: bool = False,
           mode: int = MODE_SUM, sparse: bool = False, per_sample_weights: Optional[torch.Tensor] = None,
           include_last_offset: bool = False, padding_idx: int = -1) -> Any:
        if not _bag_supported(weight, indices, offsets, mode, per_sample_weights, include_last_offset):
            return NotImplemented
        return _bag(weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx,
                    for_backward)

    return op


def _bag_supported(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, mode: int,
                   per_sample_weights: Optional[torch.Tensor], include_last_offset: bool) -> bool:
    """What ATen accepts (anything else raises there, so stays its call), small enough for the square.
    CPU tensors only: ATen's CUDA kernel returns other shapes for its three side outputs."""
    if weight.device.type != "cpu":
        return False
    if weight.dim() != 2 or weight.dtype not in _FLOATS or indices.dim() != 1 or offsets.dim() != 1:
        return False
    if indices.dtype not in _INDEX_DTYPES or offsets.dtype not in _INDEX_DTYPES or mode not in (0, 1, 2):
        return False
    if per_sample_weights is not None and (mode != MODE_SUM or per_sample_weights.dim() != 1 or
                                           per_sample_weights.numel() != indices.numel() or
                                           per_sample_weights.dtype != weight.dtype):
        return False
    sizes = (*weight.shape, indices.shape[0], offsets.shape[0])
    if not all(isinstance(s, int) for s in sizes):
        return False
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    # an empty bag list or no indices at all: PyTorch's call (nothing to gain)
    return bags > 0 and indices.shape[0] > 0 and indices.shape[0] * bags * weight.shape[1] <= SHORT_SCATTER


def _fast_sum_path(weight: torch.Tensor, per_sample_weights: Optional[torch.Tensor], padding_idx: int) -> bool:
    """ATen's fbgemm path for sum and mean (is_fast_path): a bag ends at the next offset, and it
    computes no offset2bag."""
    if weight.dtype not in (torch.float32, torch.float16, torch.bfloat16) or weight.stride(1) != 1:
        return False
    return padding_idx < 0 and (per_sample_weights is None or per_sample_weights.stride(0) == 1)


def _bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor, mode: int,
         per_sample_weights: Optional[torch.Tensor], include_last_offset: bool, padding_idx: int,
         for_backward: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    index_dtype = torch.promote_types(indices.dtype, offsets.dtype)
    device, count = weight.device, indices.shape[0]
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    # ATen's checks: offsets[0] == 0 and no offset past the indices; an index out of range raises
    # in the index_select that gathers the rows.
    first = torch.arange(offsets.shape[0], device=device) == 0
    offsets = offsets.to(torch.int64)
    offsets = offsets + raise_unless((offsets >= 0) & (offsets <= count) & ~(first & (offsets != 0)))
    rows = weight.index_select(0, indices)  # [n, D]
    position = torch.arange(count, device=device)
    # offset2bag as ATen makes it: how many of the bags' offsets come at or before each index, less one
    bag_of = _offset2bag(offsets[:bags], count)  # [n]
    member = bag_of.unsqueeze(1) == torch.arange(bags, device=device)  # [n, B]
    padded = 0  # padding entries ATen takes off each bag's size
    if padding_idx >= 0:  # never on the fast path
        padding = (indices == padding_idx).unsqueeze(1)
        padded = (member & padding).sum(0)
        member = member & ~padding
    fast = mode != MODE_MAX and _fast_sum_path(weight, per_sample_weights, padding_idx)
    if fast and include_last_offset:  # the fast path's last bag ends at the last offset, not at n
        member = member & (position < offsets[bags]).unsqueeze(1)
    offset2bag = bag_of.to(index_dtype) if mode != MODE_SUM or not fast else indices.new_zeros(0, dtype=index_dtype)
    # ATen's bag sizes: offset differences, the last bag up to n, less the padding entries
    ends = torch.cat([offsets[1:bags], offsets.new_full((1,), count)])
    bag_size = ends - offsets[:bags] - padded
    if mode == MODE_MAX:
        output, max_indices = _bag_max(rows, indices, member, index_dtype)
        return output, offset2bag, bag_size.to(index_dtype), max_indices
    compute = torch.float32 if weight.dtype in _LOW_PRECISION else weight.dtype
    values = rows.to(compute)
    if per_sample_weights is not None:
        values = values * per_sample_weights.to(compute).unsqueeze(1)
    output = torch.where(member.unsqueeze(2), values.unsqueeze(1), 0).sum(0).to(weight.dtype)  # [B, D]
    if mode == MODE_MEAN:
        output = output / bag_size.clamp(min=1).to(weight.dtype).unsqueeze(1)
        bag_size = bag_size.to(index_dtype)
        return output, offset2bag, bag_size, bag_size.clone()
    # a sum's bag_size is zeros: of the bags for the backward, of the offsets otherwise
    zeros = indices.new_zeros(bags if for_backward else offsets.shape[0], dtype=index_dtype)
    return output, offset2bag, zeros, zeros.clone()


def _offset2bag(offsets: torch.Tensor, count: int) -> torch.Tensor:
    """Each index's bag, as ATen makes offset2bag: how many offsets come at or before it, less one."""
    position = torch.arange(count, device=offsets.device)
    return (offsets.unsqueeze(0) <= position.unsqueeze(1)).sum(1) - 1


def _bag_max(rows: torch.Tensor, indices: torch.Tensor, member: torch.Tensor,
             index_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen keeps each bag's first entry, then takes every later one that is greater (>): the result is
    the first entry if that is NaN, else the largest non-NaN entry, at the first place it occurs; an
    empty bag gives 0 at index 0. rows [n, D], member [n, B] -> output [B, D], max_indices [B, D]."""
    count = rows.shape[0]
    position = torch.arange(count, device=rows.device)
    first = torch.where(member, position.unsqueeze(1), count).amin(0)  # [B]; n for an empty bag
    empty = first == count
    first = first.clamp(max=count - 1)
    first_value = rows.index_select(0, first)  # [B, D]
    inside = member.unsqueeze(2)  # [n, B, 1]
    candidates = rows.unsqueeze(1)  # [n, 1, D]
    numbers = inside & ~torch.isnan(candidates)
    largest = torch.where(numbers, candidates, extreme_identity(rows.dtype, "max")).amax(0)  # [B, D]
    at = torch.where(numbers & (candidates == largest.unsqueeze(0)), position.reshape(-1, 1, 1), count).amin(0)
    at = torch.where(torch.isnan(first_value) | (at == count), first.unsqueeze(1), at)  # [B, D]
    value = rows.gather(0, at)
    word = indices.to(index_dtype).index_select(0, at.reshape(-1)).reshape(at.shape)
    empty = empty.unsqueeze(1)
    return torch.where(empty, 0, value), torch.where(empty, 0, word)


def embedding_renorm(self: torch.Tensor, indices: torch.Tensor, max_norm: float, norm_type: float) -> Any:
    """The rows `indices` reads, scaled by max_norm / (norm + 1e-7) where their norm exceeds max_norm
    (the functional form of F.embedding's and F.embedding_bag's max_norm). ATen computes the scale in
    double, and the row times the scale rounded to the row's dtype (by experiment: fp16 rows match
    eager bit for bit only so), in fp32 for fp16/bf16."""
    if self.dim() != 2 or self.dtype not in _FLOATS or indices.dtype not in _INDEX_DTYPES:
        return NotImplemented
    vocabulary = self.shape[0]
    flat = indices.reshape(-1).to(torch.int64)
    if flat.numel() == 0 or flat.numel() * vocabulary > SHORT_SCATTER:
        return NotImplemented
    # ATen reads self[i]: a negative index counts from the end, one out of range raises
    flat = torch.arange(vocabulary, device=self.device).index_select(0, torch.where(flat < 0, flat + vocabulary, flat))
    read = (flat.unsqueeze(0) == torch.arange(vocabulary, device=self.device).unsqueeze(1)).sum(1) > 0  # [V]
    norm = torch.linalg.vector_norm(self, norm_type, dim=1).to(torch.float64)
    opmath = torch.float64 if self.dtype == torch.float64 else torch.float32
    scale = (max_norm / (norm + 1e-7)).to(self.dtype).to(opmath).unsqueeze(1)
    scaled = (self.to(opmath) * scale).to(self.dtype)
    return torch.where((read & (norm > max_norm)).unsqueeze(1), scaled, self)


def embedding_bag_backward(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                           offset2bag: torch.Tensor, bag_size: torch.Tensor, max_indices: torch.Tensor,
                           num_weights: int, scale_grad_by_freq: bool, mode: int, sparse: bool,
                           per_sample_weights: Optional[torch.Tensor], padding_idx: int = -1) -> Any:
    """The weight's gradient of an embedding bag, as ATen's CPU kernel makes it (dense): each index's
    bag gradient added into its row (scaled by its per-sample weight, by 1/bag size for a mean;
    padding_idx entries add nothing), or for a max each bag's
    gradient added where its maximum came from (bags of size 0 add nothing). scale_grad_by_freq stays
    PyTorch's call for sum and mean (below); a max ignores it, as ATen does. The adds are our scatter
    (scatter_family.py), in another order than ATen's sorted loop: the same within rounding."""
    if sparse or grad.device.type != "cpu" or grad.dim() != 2 or grad.dtype not in _FLOATS:
        return NotImplemented
    if scale_grad_by_freq and mode != MODE_MAX:
        # ATen's CPU kernel divides by the count of another index than the one it adds to (the i-th of
        # the sorted indices for the i-th distinct one; torch 2.13): not a documented meaning to copy,
        # and not one to differ from silently. Its call stays.
        return NotImplemented
    if indices.dim() != 1 or indices.dtype not in _INDEX_DTYPES or mode not in (0, 1, 2):
        return NotImplemented
    if not all(isinstance(s, int) for s in (*grad.shape, indices.shape[0], offsets.shape[0], num_weights)):
        return NotImplemented
    compute = torch.float32 if grad.dtype in _LOW_PRECISION else grad.dtype
    width = grad.shape[1]
    weight_grad = grad.new_zeros((num_weights, width), dtype=compute)
    if mode == MODE_MAX:
        read = (bag_size != 0).unsqueeze(1)  # [B, 1]
        rows = torch.where(read, max_indices, 0).to(torch.int64)
        values = torch.where(read, grad.to(compute), 0)
        return weight_grad.scatter_add(0, rows, values).to(grad.dtype)
    count = indices.shape[0]
    if count == 0:
        return weight_grad.to(grad.dtype)
    if offset2bag.numel() == 0:  # ATen's fast sum path returns none: its backward makes it from the offsets
        offset2bag = _offset2bag(offsets.to(torch.int64), count)  # over every offset, as ATen's backward
    # An index past include_last_offset's last offset is in no bag (the forward left it out): nothing.
    outside = offset2bag.to(torch.int64) >= grad.shape[0]
    offset2bag = torch.where(outside, 0, offset2bag.to(torch.int64))
    values = grad.to(compute).index_select(0, offset2bag)  # [n, D]: each index's bag gradient
    scale = None
    if per_sample_weights is not None:
        scale = per_sample_weights.to(compute)
    if mode == MODE_MEAN:
        sizes = bag_size.to(compute).index_select(0, offset2bag)
        scale = 1 / sizes if scale is None else scale / sizes
    if scale is not None:
        values = values * scale.unsqueeze(1)
    skipped = outside | (indices == padding_idx) if padding_idx >= 0 else outside
    values = torch.where(skipped.unsqueeze(1), 0, values)
    rows = indices.to(torch.int64).unsqueeze(1).expand(count, width)
    return weight_grad.scatter_add(0, rows, values).to(grad.dtype)


def embedding_bag_dense_backward(grad: torch.Tensor, indices: torch.Tensor, offset2bag: torch.Tensor,
                                 bag_size: torch.Tensor, max_indices: torch.Tensor, num_weights: int,
                                 scale_grad_by_freq: bool, mode: int, per_sample_weights: Optional[torch.Tensor],
                                 padding_idx: int = -1) -> Any:
    if indices.numel() and offset2bag.numel() == 0:
        return NotImplemented  # no offsets here to make it from
    return embedding_bag_backward(grad, indices, indices.new_zeros(0), offset2bag, bag_size, max_indices,
                                  num_weights, scale_grad_by_freq, mode, False, per_sample_weights, padding_idx)


SEGMENTS = {
    aten.segment_reduce.default: segment_reduce,
    aten._embedding_bag_backward.default: embedding_bag_backward,
    aten._embedding_bag_dense_backward.default: embedding_bag_dense_backward,
    aten._embedding_bag_forward_only.default: _embedding_bag(for_backward=False),
    aten._embedding_bag.default: _embedding_bag(for_backward=True),
    aten.embedding_renorm.default: embedding_renorm,
}
