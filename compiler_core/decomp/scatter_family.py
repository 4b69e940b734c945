"""The scatter family (scatter, scatter_add, scatter_reduce, index_add/copy/fill/reduce, index_put
on leading dims, put, as_strided/diagonal_scatter, masked_scatter, embedding's backward) and the
sorted searches (bucketize, searchsorted) as masked reductions: a gather of what lands where.

ATen writes each source element at its index, one after another (on CUDA with atomic adds, in a
different order each run). Read the other way round, every output position p along `dim` reduces
the source elements whose index is p:

    hits[..., j, p, ...] = index[..., j, ...] == p          (j: the scattered elements, p: positions)
    out[..., p, ...]     = self  (+, *, max, min, mean)  reduce over j of where(hits, src, identity)

The where and the reduction fuse into one kernel and `hits` is never stored, so the result is our
kernel and deterministic; an overwrite (scatter, index_copy) takes the last j that hits p, as
ATen's CPU loop does. It is (scattered elements) x (positions) work: nothing for a relative-position
bias table or a small gather's backward, ruinous for a graph network's scatter over 10^6 nodes, so
above SHORT_SCATTER an overwrite is one store per element (store_scatter.py), a sum or a mean
the atomic scatter's sums of the values and of the hits (below), and prod, amax and amin stay
PyTorch's. Indices are bounds-checked as ATen checks them
(an index_select of the positions, which raises on an index out of range).

Sums (scatter_add, index_add, put and index_put with accumulate, embedding's backward) have a second
form, the atomic scatter (atomic_scatter.py): one add per scattered element, so no cap; taken above
the cap and wherever the dense form is several times its work (see scatter_add). Its float sums
come in a different order each run, as on eager CUDA.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch
import torch.nn.functional as F

from compiler_core import _compat
from compiler_core.decomp.atomic_scatter import atomic_cheaper, atomic_scatter_add
from compiler_core.decomp.scans import SHORT_SCAN, extreme_identity
from compiler_core.decomp.store_scatter import store_scatter

aten = torch.ops.aten
SHORT_SCATTER = 1 << 24  # scattered elements x positions along dim, at most
REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _supported(self: torch.Tensor, index: torch.Tensor, src: Optional[torch.Tensor] = None,
               overwrite: bool = False) -> bool:
    """Real data with a non-empty int64 index (an empty one, or other dtypes: PyTorch's call); bools only
    for overwrites, which select and never add (cumprod's backward scatters True into a bool mask).
    Index and source with self's number of dimensions: eager also takes a 0-d index or source into a
    1-d tensor (as one element), which the forms below would unsqueeze past its last dimension (the
    random programs' scatter_add of a sum's scalar: IndexError, the graph ran in eager)."""
    if self.dim() == 0 or index.numel() == 0 or index.dtype != torch.int64:
        return False
    if index.dim() != self.dim() or (src is not None and src.dim() != self.dim()):
        return False
    if (self.dtype == torch.bool and not overwrite) or self.is_complex():
        return False
    return src is None or src.dtype == self.dtype


def _short(self: torch.Tensor, dim: int, index: torch.Tensor) -> bool:
    sizes = (*self.shape, *index.shape)
    if not all(isinstance(s, int) for s in sizes):
        return False
    return index.numel() * self.shape[dim] <= SHORT_SCATTER


class _Hits:
    """Which position along `dim` each element of `index` hits, and the source it brings."""

    def __init__(self, self_: torch.Tensor, dim: int, index: torch.Tensor, src: Optional[torch.Tensor]):
        self.self, self.dim, self.size = self_, dim, self_.shape[dim]
        device = self_.device
        # Bounds-checked as ATen checks a scatter's index: index_select refuses a position out of range.
        checked = torch.arange(self.size, device=device).index_select(0, index.reshape(-1)).reshape(index.shape)
        positions = torch.arange(self.size, device=device).reshape([self.size] + [1] * (index.dim() - dim - 1))
        self.mask = checked.unsqueeze(dim + 1) == positions  # [..., j, p, ...]
        self.extent = index.shape
        if src is not None:
            self.src = src[tuple(slice(0, s) for s in index.shape)].unsqueeze(dim + 1)

    def reduce(self, kind: str) -> torch.Tensor:
        """Over the scattered elements (j): [..., p, ...] with index's extent in the other dims."""
        dtype = self.self.dtype
        if kind == "sum":
            return torch.where(self.mask, self.src, 0).sum(self.dim, dtype=dtype)
        if kind == "prod":
            return torch.where(self.mask, self.src, 1).prod(self.dim, dtype=dtype)
        if kind in ("amax", "amin"):
            rows = torch.where(self.mask, self.src, extreme_identity(dtype, kind[1:]))
            return rows.amax(self.dim) if kind == "amax" else rows.amin(self.dim)
        if kind == "count":
            return self.mask.sum(self.dim)
        if kind == "last":  # the last scattered element hitting each position, -1 where none does
            count = self.extent[self.dim]
            j = torch.arange(count, device=self.self.device).reshape([count] + [1] * (len(self.extent) - self.dim))
            return torch.where(self.mask, j, -1).amax(self.dim)
        raise ValueError(kind)

    def fit(self, t: torch.Tensor, fill: Any) -> torch.Tensor:
        """`t` (index's extent in the dims other than `dim`) padded to self's shape with `fill`."""
        pad: list[int] = []
        for d in reversed(range(t.dim())):
            pad += [0, 0 if d == self.dim else self.self.shape[d] - t.shape[d]]
        if not any(pad):
            return t
        if t.dtype == torch.bool:
            return F.pad(t.to(torch.uint8), pad, value=int(fill)).to(torch.bool)
        return F.pad(t, pad, value=fill)


def _combine(kind: str, self: torch.Tensor, hits: "_Hits | _AtomicHits", include_self: bool) -> torch.Tensor:
    """scatter_reduce's rule for one reduction (ATen's: the identity where nothing lands), from the
    dense masked reduction or, for sums and means above its cap, the atomic scatter's sums."""
    landed = hits.fit(hits.reduce("count") > 0, False)
    if kind == "mean":
        total = hits.fit(hits.reduce("sum"), 0)
        count = hits.fit(hits.reduce("count"), 0)
        if include_self:
            total, count = total + self, count + 1
        count = count.clamp(min=1).to(self.dtype)
        mean = total / count if self.dtype.is_floating_point else torch.div(total, count, rounding_mode="floor")
        return torch.where(landed, mean.to(self.dtype), self)
    identity = {"sum": 0, "prod": 1}.get(kind, 0)
    value = hits.fit(hits.reduce(kind), identity)
    if include_self:
        if kind == "sum":
            return self + value
        if kind == "prod":
            return self * value
        both = torch.maximum(self, value) if kind == "amax" else torch.minimum(self, value)
        return torch.where(landed, both, self)
    return torch.where(landed, value, self)


def scatter_src(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    dim = dim % max(self.dim(), 1)
    if not _supported(self, index, src, overwrite=True):
        return NotImplemented
    if not _short(self, dim, index):  # one store per element (store_scatter.py), else PyTorch's call
        stored = store_scatter(self, dim, index, src)
        return NotImplemented if stored is None else stored
    if _compat.traced_as_graph_input(self):
        # Likely an in-place update of the caller's tensor (a static KV cache's index_copy_): in the
        # store form, lowering may write the stored elements straight into that input when nothing else
        # reads its old value (ir/lowering/scatter.py), instead of a new full-size copy per call.
        stored = store_scatter(self, dim, index, src)
        if stored is not None:
            return stored
    hits = _Hits(self, dim, index, src)
    last = hits.reduce("last")
    placed = src.gather(dim, last.clamp(min=0))
    return torch.where(hits.fit(last >= 0, False), hits.fit(placed, 0), self)


def scatter_value(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any) -> torch.Tensor:
    dim = dim % max(self.dim(), 1)
    if not _supported(self, index, overwrite=True):
        return NotImplemented
    if not _short(self, dim, index):  # the value stored at each position hit (store_scatter.py)
        stored = store_scatter(self, dim, index, self.new_full(index.shape, value))
        return NotImplemented if stored is None else stored
    hits = _Hits(self, dim, index, None)
    # The value in self's dtype, as eager converts it (a Python 1 into a bool tensor stays bool; with
    # the bare scalar, where() promoted the result to int64).
    value = value.to(self.dtype) if isinstance(value, torch.Tensor) else self.new_full((), value)
    return torch.where(hits.fit(hits.reduce("count") > 0, False), value, self)


def scatter_add(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """Sums: the atomic scatter (atomic_scatter.py) where the dense form is over the cap or several times
    the work, else the dense form (deterministic)."""
    dim = dim % max(self.dim(), 1)
    if not _supported(self, index, src):
        return NotImplemented
    short = _short(self, dim, index)
    if not short or atomic_cheaper(self, dim, index):
        summed = atomic_scatter_add(self, dim, index, src) if _static(self, index) else None
        if summed is not None or not short:
            return NotImplemented if summed is None else summed
    hits = _Hits(self, dim, index, src)
    return self + hits.fit(hits.reduce("sum"), 0)


def _static(*tensors: torch.Tensor) -> bool:
    return all(isinstance(s, int) for t in tensors for s in t.shape)


def scatter_reduce(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor, reduce: str, *,
                   include_self: bool = True) -> torch.Tensor:
    dim = dim % max(self.dim(), 1)
    if reduce == "sum" and include_self:  # scatter_add itself: the atomic scatter where that is cheaper
        return scatter_add(self, dim, index, src)
    if reduce not in REDUCTIONS or not _supported(self, index, src):
        return NotImplemented
    if not _short(self, dim, index):  # sums and means: atomic sums of the values and of the hits
        hits = _AtomicHits.of(self, dim, index, src) if reduce in ("sum", "mean") and _static(self, index) else None
        return NotImplemented if hits is None else _combine(reduce, self, hits, include_self)
    return _combine(reduce, self, _Hits(self, dim, index, src), include_self)


class _AtomicHits:
    """_Hits' sum and count through the atomic scatter (one add per scattered element), for a sum or a
    mean above the dense form's cap: both already have self's shape. Float sums come in a different
    order each run, as scatter_add's do; counts are int64 adds, exact."""

    def __init__(self, total: torch.Tensor, count: torch.Tensor):
        self.total, self.count = total, count

    @classmethod
    def of(cls, self_: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> Optional["_AtomicHits"]:
        total = atomic_scatter_add(torch.zeros_like(self_), dim, index, src)
        zeros = torch.zeros(self_.shape, dtype=torch.int64, device=self_.device)
        count = atomic_scatter_add(zeros, dim, index, torch.ones(index.shape, dtype=torch.int64, device=self_.device))
        return None if total is None or count is None else cls(total, count)

    def reduce(self, kind: str) -> torch.Tensor:
        return {"sum": self.total, "count": self.count}[kind]

    def fit(self, t: torch.Tensor, fill: Any) -> torch.Tensor:
        return t


def _along(index: torch.Tensor, dim: int, like: torch.Tensor) -> torch.Tensor:
    """A 1-d index along `dim`, as scatter's index: the same position for every slice of `like`."""
    shape = [1] * like.dim()
    shape[dim] = index.numel()
    return index.reshape(shape).expand(like.shape)


def _index_op(scatter_form):
    """index_add/copy/reduce(self, dim, index, source, ...): a 1-d index along `dim` (0-d tensors
    act as 1-d ones, as in ATen), given to the scatter form with that index spread over `source`."""
    def op(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *args: Any,
           **kwargs: Any) -> torch.Tensor:
        if index.dim() > 1 or source.dim() != self.dim():
            return NotImplemented
        if self.dim() == 0:
            out = op(self.reshape(1), 0, index.reshape(1), source.reshape(1), *args, **kwargs)
            return out if out is NotImplemented else out.reshape(())
        dim = dim % self.dim()
        return scatter_form(self, dim, _along(index.reshape(-1), dim, source), source, *args, **kwargs)

    return op


def _scatter_add_scaled(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *,
                        alpha: Any = 1) -> torch.Tensor:
    if alpha == 1:
        return scatter_add(self, dim, index, source)
    # Eager's index_add with an alpha raises IndexError for a position out of range (scatter_add's check
    # raises RuntimeError): checked here first, as index_select checks (a gather fused into the scatter).
    size = self.shape[dim]
    index = torch.arange(size, device=self.device).index_select(0, index.reshape(-1)).reshape(index.shape)
    return scatter_add(self, dim, index, source * alpha)


index_add = _index_op(_scatter_add_scaled)
index_copy = _index_op(scatter_src)
index_reduce = _index_op(scatter_reduce)


def index_fill(self: torch.Tensor, dim: int, index: torch.Tensor, value: Any) -> torch.Tensor:
    if index.dim() > 1 or (isinstance(value, torch.Tensor) and value.dim() != 0):
        return NotImplemented
    if self.dim() == 0:
        out = index_fill(self.reshape(1), 0, index.reshape(1), value)
        return out if out is NotImplemented else out.reshape(())
    dim = dim % self.dim()
    like = list(self.shape)
    like[dim] = index.numel()
    shape = [1] * self.dim()
    shape[dim] = index.numel()
    return scatter_value(self, dim, index.reshape(shape).expand(like), value)


def _wrapped(index: torch.Tensor, size: int) -> torch.Tensor:
    """Negative positions count from the end, as put and index_put read them."""
    return torch.where(index < 0, index + size, index)


def _checked_positions(index: torch.Tensor, size: int, device: Any) -> torch.Tensor:
    """index_put's positions along a dim of `size`, flat, wrapped and bounds-checked as ATen checks
    them (an index_select of the positions, which raises IndexError for one out of range)."""
    return torch.arange(size, device=device).index_select(0, _wrapped(index.reshape(-1).to(torch.int64), size))


def put(self: torch.Tensor, index: torch.Tensor, source: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    if self.dim() == 0:
        return NotImplemented
    flat, positions = self.reshape(-1), _wrapped(index.reshape(-1), self.numel())
    values = source.reshape(-1)
    out = scatter_add(flat, 0, positions, values) if accumulate else scatter_src(flat, 0, positions, values)
    return out if out is NotImplemented else out.reshape(self.shape)


def index_put(self: torch.Tensor, indices: list, values: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    """Integer index tensors on adjacent dims: an embedding table's or bias table's rows, max_unpool's
    (batch, channel, position), a bilinear upsample's backward (`grad[:, :, ys, xs] += values`). Each
    index is bounds-checked against its own dim, then the positions are linearized over those dims and
    scattered along one flattened dim. Indexed dims after unindexed ones (`None` first) are moved to the
    front, and the result moved back."""
    indices = list(indices)
    while indices and indices[-1] is None:  # x[i, None...] is x[i]
        indices.pop()
    skipped = 0
    while skipped < len(indices) and indices[skipped] is None:
        skipped += 1
    if skipped:
        return _index_put_after(self, skipped, indices[skipped:], values, accumulate)
    count = len(indices)
    if count == 0 or count > self.dim() or any(i is None or i.dtype not in (torch.int64, torch.int32)
                                                for i in indices):
        return NotImplemented
    if values.dtype != self.dtype:
        return NotImplemented
    broadcast = torch.broadcast_tensors(*indices)
    lead, rest = self.shape[:count], self.shape[count:]
    linear = None
    for index, size in zip(broadcast, lead):
        checked = _checked_positions(index, size, self.device)
        linear = checked if linear is None else linear * size + checked
    rows = 1
    for size in lead:
        rows *= size
    flat = self.reshape(rows, *rest)
    values = values.expand(*broadcast[0].shape, *rest).reshape(linear.numel(), *rest)
    along = _along(linear, 0, values)
    out = scatter_add(flat, 0, along, values) if accumulate else scatter_src(flat, 0, along, values)
    return out if out is NotImplemented else out.reshape(self.shape)


def _index_put_after(self: torch.Tensor, skipped: int, indices: list, values: torch.Tensor,
                     accumulate: bool) -> torch.Tensor:
    """index_put with `skipped` unindexed leading dims: the indexed dims first (the tensors' positions
    then lead, as index_put on leading dims wants), the values' dims alike, and back."""
    count = len(indices)
    if count == 0 or skipped + count > self.dim() or any(i is None for i in indices):
        return NotImplemented  # a gap between indexed dims puts the result's dims first: not handled
    if count == 1:
        return _index_put_along(self, skipped, indices[0], values, accumulate)
    ndim = self.dim()
    indexed = list(range(skipped, skipped + count))
    order = indexed + [d for d in range(ndim) if d not in indexed]
    positions = torch.broadcast_shapes(*(i.shape for i in indices))
    before, after = self.shape[:skipped], self.shape[skipped + count:]
    values = values.expand(*before, *positions, *after)
    width = len(positions)
    value_order = (list(range(skipped, skipped + width)) + list(range(skipped))
                   + list(range(skipped + width, values.dim())))
    moved = index_put(self.permute(order), indices, values.permute(value_order), accumulate)
    if moved is NotImplemented:
        return NotImplemented
    back = [order.index(d) for d in range(ndim)]
    return moved.permute(back).contiguous()


def _index_put_along(self: torch.Tensor, dim: int, index: torch.Tensor, values: torch.Tensor,
                     accumulate: bool) -> torch.Tensor:
    """`self[:, ..., index] = values` (one index tensor after `dim` whole dims, as a KV cache's
    `cache[:, :, positions] = new`): a scatter along `dim`, its result in self's layout. Moving the
    indexed dim to the front and back, as for several index tensors, would end in a copy of the whole
    result, and the scatter's result could no longer be stored into self in place."""
    if index.dtype not in (torch.int64, torch.int32) or values.dtype != self.dtype:
        return NotImplemented
    size = self.shape[dim]
    checked = _checked_positions(index, size, self.device)
    before, after = self.shape[:dim], self.shape[dim + 1:]
    values = values.expand(*before, *index.shape, *after).reshape(*before, index.numel(), *after)
    along = _along(checked, dim, values)
    return scatter_add(self, dim, along, values) if accumulate else scatter_src(self, dim, along, values)


def _unsafe_index_put(self: torch.Tensor, indices: list, values: torch.Tensor,
                      accumulate: bool = False) -> torch.Tensor:
    # "unsafe" only skips ATen's bounds check; ours keeps it
    return index_put(self, indices, values, accumulate)


def diagonal_scatter(input: torch.Tensor, src: torch.Tensor, offset: int = 0, dim1: int = 0,
                     dim2: int = 1) -> torch.Tensor:
    """`src` on a diagonal of a row-major input: as_strided_scatter at the diagonal view's strides."""
    if input.dim() < 2 or tuple(input.stride()) != _row_major(input.shape):
        return NotImplemented
    dim1, dim2 = dim1 % input.dim(), dim2 % input.dim()
    stride = input.stride()
    start = offset * stride[dim2] if offset >= 0 else -offset * stride[dim1]
    length = max(min(input.shape[dim1] + min(offset, 0), input.shape[dim2] - max(offset, 0)), 0)
    keep = [d for d in range(input.dim()) if d not in (dim1, dim2)]
    size = [input.shape[d] for d in keep] + [length]
    strides = [stride[d] for d in keep] + [stride[dim1] + stride[dim2]]
    if length == 0:
        return NotImplemented
    return as_strided_scatter(input, src, size, strides, start)


def _count_below(sequence: torch.Tensor, values: torch.Tensor, right: bool) -> torch.Tensor:
    """How many of a sorted sequence's last-dim entries come before each value: the binary search's
    answer as a count (a NaN value counts them all, as the search's failed compares do)."""
    seq, val = sequence.unsqueeze(-2), values.unsqueeze(-1)  # [..., 1, M] against [..., K, 1]
    before = ~(seq > val) if right else ~(seq >= val)
    return before.sum(-1)


def bucketize(input: torch.Tensor, boundaries: torch.Tensor, *, out_int32: bool = False,
              right: bool = False) -> torch.Tensor:
    if boundaries.dim() != 1 or input.numel() * boundaries.numel() > SHORT_SCATTER:
        return NotImplemented
    if input.is_complex() or input.dtype == torch.bool:
        return NotImplemented
    if boundaries.numel() == 0:
        return input.new_zeros(input.shape, dtype=torch.int32 if out_int32 else torch.int64)
    flat = input.reshape(-1)
    counts = _count_below(boundaries, flat, right).reshape(input.shape)
    return counts.to(torch.int32 if out_int32 else torch.int64)


def searchsorted(sorted_sequence: torch.Tensor, input: torch.Tensor, *, out_int32: bool = False,
                 right: bool = False, side: Optional[str] = None,
                 sorter: Optional[torch.Tensor] = None) -> torch.Tensor:
    if side is not None:
        right = side == "right"
    if input.numel() * sorted_sequence.shape[-1] > SHORT_SCATTER or input.is_complex() or input.dtype == torch.bool:
        return NotImplemented
    if sorted_sequence.shape[-1] == 0:  # nothing comes before any value
        return input.new_zeros(input.shape, dtype=torch.int32 if out_int32 else torch.int64)
    if sorter is not None:
        sorted_sequence = sorted_sequence.gather(-1, sorter)
    if sorted_sequence.dim() == 1:
        counts = _count_below(sorted_sequence, input.reshape(-1), right).reshape(input.shape)
    else:
        if input.dim() != sorted_sequence.dim() or input.shape[:-1] != sorted_sequence.shape[:-1]:
            return NotImplemented
        counts = _count_below(sorted_sequence, input, right)
    return counts.to(torch.int32 if out_int32 else torch.int64)


def _row_major(shape: torch.Size) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def as_strided_scatter(input: torch.Tensor, src: torch.Tensor, size: list, stride: list,
                       storage_offset: Optional[int] = None) -> torch.Tensor:
    """`src` written over the strided view of a contiguous input: put() at the view's offsets (the
    offsets are arange arithmetic). A non-contiguous input's storage order is not its index order:
    PyTorch's call."""
    # Exactly row-major strides, size-1 dims too: eager places the view by the input's own strides.
    if input.dim() == 0 or tuple(input.stride()) != _row_major(input.shape):
        return NotImplemented
    if tuple(src.shape) != tuple(size) or src.dtype != input.dtype:
        return NotImplemented
    offsets = torch.full(tuple(size), storage_offset or 0, dtype=torch.int64, device=input.device)
    for d, (n, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        offsets = offsets + torch.arange(n, device=input.device).reshape(shape) * step
    return put(input, offsets, src)


def embedding_dense_backward(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int,
                             padding_idx: int, scale_grad_by_freq: bool) -> torch.Tensor:
    """The embedding table's gradient: each row sums the gradients of the tokens that read it (not
    those of padding_idx, whose gradient is zeroed by a `where` that fuses into the scatter's kernel).
    A real vocabulary times a real batch of tokens is the atomic scatter (scatter_add says when);
    scale_grad_by_freq (a count per row first) stays PyTorch's call."""
    if scale_grad_by_freq or indices.dtype != torch.int64 or grad_output.dim() != indices.dim() + 1:
        return NotImplemented
    width = grad_output.shape[-1]
    grads = grad_output.reshape(-1, width)
    rows = indices.reshape(-1)
    if rows.numel() == 0:
        return NotImplemented
    grads = torch.where((rows == padding_idx).unsqueeze(1), 0, grads)
    table = grads.new_zeros(num_weights, width)
    return scatter_add(table, 0, _along(rows, 0, grads), grads)


def masked_scatter(self: torch.Tensor, mask: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """The source's elements in order at the positions the mask selects: the k-th selected position
    takes source[k], k counted by a prefix sum of the mask (our short scan)."""
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    if tuple(shape) != tuple(self.shape) or self.numel() > SHORT_SCAN or source.numel() == 0:
        return NotImplemented
    if source.dtype != self.dtype:
        return NotImplemented
    selected = mask.expand(shape).reshape(-1)
    taken = torch.cumsum(selected.to(torch.int64), 0) - 1
    placed = source.reshape(-1).index_select(0, torch.where(selected, taken, 0))
    return torch.where(selected, placed, self.reshape(-1)).reshape(shape)


def index_select_of_a_scalar(self: torch.Tensor, dim: int, index: torch.Tensor) -> Any:
    """index_select of a 0-d tensor reads it as one element (its index must hold one position, 0 or -1
    refused as ATen refuses them): the same op on a 1-element view, so the bounds check stays the
    lowering's and the result takes the 0-d shape."""
    if self.dim() != 0 or index.numel() != 1:
        return NotImplemented
    return aten.index_select(self.reshape(1), 0, index.reshape(1)).reshape(())


def nonzero_static(self: torch.Tensor, *, size: int, fill_value: int = -1) -> Any:
    """The first `size` nonzero positions in row-major order, padded with fill_value: position p of the
    output takes the nonzero element with p nonzeros before it (a masked reduction over p and the
    elements, like a scatter read the other way round), then its flat index unravelled."""
    count = self.numel()
    if self.is_complex() or not isinstance(size, int) or size < 0 or size * count > SHORT_SCATTER:
        return NotImplemented
    if self.dim() == 0 or count == 0 or size == 0:
        return torch.full((size, self.dim()), fill_value, dtype=torch.int64, device=self.device)
    nonzero = self.reshape(-1) != 0
    before = torch.cumsum(nonzero.to(torch.int64), 0) - nonzero.to(torch.int64)
    hit = nonzero & (before == torch.arange(size, device=self.device).unsqueeze(-1))  # [size, elements]
    flat = torch.where(hit, torch.arange(count, device=self.device), -1).amax(-1)
    strides = [math.prod(self.shape[d + 1:]) for d in range(self.dim())]
    coordinates = torch.stack([(flat // stride) % extent for stride, extent in zip(strides, self.shape)], -1)
    return torch.where(flat.unsqueeze(-1) >= 0, coordinates, fill_value)


SCATTER_FAMILY = {
    aten.scatter.src: scatter_src, aten.scatter.value: scatter_value, aten.scatter_add.default: scatter_add,
    aten.scatter_reduce.two: scatter_reduce, aten.index_add.default: index_add,
    aten.index_copy.default: index_copy, aten.index_fill.int_Scalar: index_fill,
    aten.index_fill.int_Tensor: index_fill, aten.index_reduce.default: index_reduce, aten.put.default: put,
    aten.index_put.default: index_put, aten.masked_scatter.default: masked_scatter,
    aten.embedding_dense_backward.default: embedding_dense_backward,
    aten.as_strided_scatter.default: as_strided_scatter, aten._unsafe_index_put.default: _unsafe_index_put,
    aten.diagonal_scatter.default: diagonal_scatter, aten.bucketize.Tensor: bucketize,
    aten.searchsorted.Tensor: searchsorted, aten.index_select.default: index_select_of_a_scalar,
    aten.nonzero_static.default: nonzero_static,
}
