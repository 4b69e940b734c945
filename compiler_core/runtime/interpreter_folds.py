"""Our three tl.reduce combine functions at numpy speed in Triton's interpreter, with its own results.

Triton's interpreter runs tl.sum, tl.max and tl.min as numpy reductions, but a tl.reduce with any other
combine function one element at a time in Python: a Python call of the combine function per element,
each building interpreter tensors (about 0.3 ms). Our max and min that keep NaN (tl.max drops it) and
our product are such functions, so every float max/min row in an interpreted kernel (softmax's row
max, max pooling) paid that: a 3-D max pool with indices over 30,000 values took 26 s a call
(2026-12-06, 2-core CPU), nearly all of it in those folds.

The interpreter folds each row from its first element to its last (`acc = combine(acc, x)`), so its
result is fixed by that order; these numpy versions give the same values, bits included:
- max (`where(a > b or a is NaN, a, b)`): a NaN, once met, stays; otherwise each element at least as
  large as the running value replaces it, so the result is the row's first NaN if it has one, else the
  last element equal to its maximum (of +0 and -0, whichever comes last);
- min: the same with "at most as small";
- product: the same left-to-right product, one numpy multiply per column of the block.

Only functions our generated modules hold are folded this way (`claim`, called where the module is
executed): a user's own combine function of the same name keeps the interpreter's path.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

COMBINES = {"_amax_combine": "max", "_amin_combine": "min", "_mul_combine": "product"}
_claimed: "weakref.WeakKeyDictionary[Callable, str]" = weakref.WeakKeyDictionary()  # python function -> fold
_installed: list[bool] = []


def claim(namespace: dict[str, Any]) -> None:
    """Fold the combine functions of this executed module of ours with numpy (see the module's note)."""
    for name, fold in COMBINES.items():
        function = getattr(namespace.get(name), "fn", None)
        if callable(function):
            _claimed[function] = fold
    install()


def install() -> None:
    """Wrap the interpreter's reduction once per process; a Triton without it is left alone."""
    if _installed:
        return
    _installed.append(True)
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    reduce_ops = getattr(interpreter, "ReduceOps", None)
    if reduce_ops is None or not hasattr(reduce_ops, "apply_impl") or not hasattr(reduce_ops, "to_tensor"):
        return
    triton_apply = reduce_ops.apply_impl

    def apply_impl(self, inputs):
        fold = _claimed.get(getattr(self.combine_fn, "fn", None))
        if fold is None or len(inputs) != 1 or self.axis is None:
            return triton_apply(self, inputs)
        data = inputs[0].handle.data
        result = fold_rows(fold, data, self.axis)
        if self.keep_dims:
            result = np.expand_dims(result, self.axis)
        return [self.to_tensor(result, inputs[0].dtype)]

    reduce_ops.apply_impl = apply_impl


def fold_rows(fold: str, data: np.ndarray, axis: int) -> np.ndarray:
    """`data` folded along `axis` from first to last as the interpreter would (the module's note)."""
    axis = axis % data.ndim
    count = data.shape[axis]
    if fold == "product":
        acc = np.take(data, 0, axis=axis).copy()
        with np.errstate(all="ignore"):
            for i in range(1, count):
                acc = (acc * np.take(data, i, axis=axis)).astype(data.dtype, copy=False)
        return acc
    is_nan = data != data
    any_nan = is_nan.any(axis=axis)
    first_nan = is_nan.argmax(axis=axis)
    with np.errstate(invalid="ignore"):
        extreme = (np.max if fold == "max" else np.min)(data, axis=axis, keepdims=True)
    last_extreme = count - 1 - np.flip(data == extreme, axis=axis).argmax(axis=axis)
    pick = np.where(any_nan, first_nan, last_extreme)
    return np.take_along_axis(data, np.expand_dims(pick, axis), axis=axis).squeeze(axis)
