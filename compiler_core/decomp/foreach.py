"""Foreach ops (`aten._foreach_add.List`, `_foreach_addcdiv.Scalar`...) as one ATen op per list element.

torch.optim's steps take their foreach implementations whenever the parameters are on CUDA (the
default there), and Dynamo captures them as `_foreach_*` ops over lists of tensors. The loop IR lowers
tensors, not lists: left whole, every one of them was an extern call (Adam: 19 per step on the H200,
no kernel of ours). Taken apart during tracing, each parameter's update is a chain of pointwise ops
that fuses, and horizontal fusion (schedule/horizontal.py) puts the chains into a few kernels, as it
does for the per-parameter loop torch.optim runs on the CPU.

Only the functional overloads (returning a new list; AOTAutograd has functionalized the in-place
ones) of the ops below, whose per-element form is the ATen op of the same name with each list
argument replaced by its element. Left out on purpose: the `.Tensor` overloads of addcmul and
addcdiv, whose tensor argument holds one scalar per element; they stay extern calls. Norms
(`_foreach_norm`, which `clip_grad_norm_` calls on every gradient) are `linalg_vector_norm` per
element, written out below since their per-element op has another name.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten

ELEMENTWISE = ("add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "pow", "sqrt", "rsqrt", "neg",
               "reciprocal", "exp", "log", "abs", "sign", "maximum", "minimum", "clamp_min", "clamp_max",
               "sigmoid", "tanh", "copy", "zero")
PER_ELEMENT_SCALARS_AS_TENSOR = {("addcmul", "Tensor"), ("addcdiv", "Tensor")}


def _per_element(op: torch._ops.OpOverload, base: torch._ops.OpOverloadPacket) -> Callable[..., list]:
    arguments = op._schema.arguments
    is_list = [isinstance(a.type, torch.ListType) for a in arguments]
    # Where the per-element op takes an argument by keyword only (addcmul's `value`), pass it so; the
    # ScalarList overloads call that argument `scalars`.
    keyword_only = {a.name for overload in base.overloads() for a in getattr(base, overload)._schema.arguments
                    if a.kwarg_only}
    names = ["value" if a.name == "scalars" and "value" in keyword_only else a.name for a in arguments]

    def decomposition(*args: Any, **kwargs: Any) -> list:
        (n,) = {len(a) for a, listed in zip(args, is_list) if listed}
        out = []
        for i in range(n):
            element = [a[i] if listed else a for a, listed in zip(args, is_list)]
            positional = [v for v, name in zip(element, names) if name not in keyword_only]
            named = {name: v for v, name in zip(element, names) if name in keyword_only}
            out.append(base(*positional, **named, **kwargs))
        return out

    return decomposition


def _foreach_norm(tensors: list, ord: Any = 2, dtype: Any = None) -> list:
    return [aten.linalg_vector_norm(t, ord, dtype=dtype) for t in tensors]


def foreach_decompositions() -> dict:
    table = {aten._foreach_norm.Scalar: _foreach_norm}
    for name in ELEMENTWISE:
        packet, base = getattr(aten, f"_foreach_{name}", None), getattr(aten, name, None)
        if packet is None or base is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            returns = op._schema.returns
            functional = len(returns) == 1 and isinstance(returns[0].type, torch.ListType) and \
                not op._schema.is_mutable
            if functional and (name, overload) not in PER_ELEMENT_SCALARS_AS_TENSOR:
                table[op] = _per_element(op, base)
    return table
