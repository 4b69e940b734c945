"""The helpers a host program calls, reached as `rt.<name>` (never as bare names a local could shadow).

The memory checks (`poison`, `check_fresh`) run only in the memory checking mode
(`FCOMPILE_DEBUG=memory`, or `cc.compile(..., debug="memory")`): freed storages are filled with NaN
(integers with a sentinel) so a read after free shows up as a wrong value, and every tensor the
program makes is checked against every live one for a shared storage the plan did not expect.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

empty_strided = torch.empty_strided


def allocator(device: str) -> Callable[[tuple, tuple, torch.dtype], torch.Tensor]:
    """`alloc(size, stride, dtype)` for a host program on `device` (its current index). Where torch has
    them, its C++ allocation helpers for generated code (`torch._C._dynamo.guards._empty_strided_cpu` /
    `_cuda`, which Inductor's host code calls) skip the Python argument parsing of `torch.empty_strided`:
    0.5 µs against 1.3 µs an allocation on the CPU machine, and a host program makes one per buffer
    it does not reuse. Otherwise `torch.empty_strided`, the same tensor."""
    kind = torch.device(device).type
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    fast = getattr(guards, f"_empty_strided_{kind}", None) if kind in ("cpu", "cuda") else None
    if fast is not None and torch.device(device).index is None:
        return fast
    target = torch.device(device)

    def alloc(size: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(size, stride, dtype=dtype, device=target)

    return alloc

# Written into freed integer storages: unlikely as a real value, and visible when printed.
INT_SENTINEL = -0x5A5A5A5A
UINT8_SENTINEL = 0xA5


class MemoryCheckError(RuntimeError):
    """The memory checking mode found two live tensors in one storage: a compiler bug."""


def view(base: torch.Tensor, size: tuple, stride: tuple, offset: int) -> torch.Tensor:
    """`base`'s storage seen with `size` and `stride`, `offset` elements past `base`'s own offset;
    bounds-checked (as_strided raises on a view outside the storage)."""
    return base.as_strided(size, stride, base.storage_offset() + offset)


try:  # the same view made in C++ without the bounds check (Inductor's host code uses it): about
    # 0.6 us where `view` takes 1.3 us on the CPU machine, and a host program makes one per argument
    # that is not a whole buffer. The memory checking mode's programs call `view` instead.
    from torch._C._dynamo.guards import _reinterpret_tensor as reinterpret
except ImportError:  # pragma: no cover - older or newer torch without it
    reinterpret = view


def ensure_layout(t: torch.Tensor, size: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    """Extern calls usually return the dtype and strides torch's metadata promised; copy when they do
    not.  The kernels after them are compiled for the promised ones: `_native_batch_norm_legit_functional`
    on the CPU returns bf16 running stats where the metadata says fp32, and a kernel reading those
    bytes as floats computes garbage."""
    if t is None:  # an undefined tensor (cuDNN attention's cum_seq_q in inference); nothing reads it
        return t
    if t.dtype == dtype and (tuple(t.stride()) == tuple(stride) or t.numel() <= 1):
        return t
    out = torch.empty_strided(size, stride, dtype=dtype, device=t.device)
    out.copy_(t)
    return out


def flatten(value: Any) -> list:
    """An extern call's results in the order the IR numbers them (nested lists flattened)."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flatten(v)]
    return [value]


def poison(t: torch.Tensor) -> None:
    """Fill the whole storage behind `t`: it is dead, and nobody may read it any more."""
    if t is None:
        return
    elements = t.untyped_storage().nbytes() // t.element_size()
    if elements == 0:
        return
    if t.dtype.is_floating_point or t.dtype.is_complex:
        value: Any = float("nan")
    elif t.dtype == torch.bool:
        value = True
    elif t.dtype == torch.uint8:
        value = UINT8_SENTINEL
    else:
        value = max(INT_SENTINEL, torch.iinfo(t.dtype).min)
    t.as_strided((elements,), (1,), 0).fill_(value)


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def check_fresh(local: str, t: Any, scope: dict, same_storage: tuple[str, ...]) -> None:
    """`t` was just made: no live local outside `same_storage` may share its storage."""
    if not isinstance(t, torch.Tensor) or t.untyped_storage().nbytes() == 0:
        return
    lo, hi = _storage_span(t)
    for name, other in scope.items():
        if name == local or name in same_storage or not isinstance(other, torch.Tensor):
            continue
        if other.device != t.device or other.untyped_storage().nbytes() == 0:
            continue
        other_lo, other_hi = _storage_span(other)
        if lo < other_hi and other_lo < hi:
            raise MemoryCheckError(
                f"memory check: {_plain(local)} shares its storage with {_plain(name)}, which is still live; "
                "the memory plan handed one storage to two tensors (please report this compiler bug)")


def check_kernel(checker: Any, kernel: str, scope: dict) -> None:
    """Check mode (runtime/check.py): compare the kernel just launched with eager PyTorch."""
    checker.check(kernel, scope)


def _plain(local: str) -> str:
    return local[2:] if local.startswith("v_") else local
