"""PyTorch calls on complex values inside a graph rewritten into real ones (complex_pairs.py).

An op on complex values with no real rewrite (an FFT, an eigendecomposition, a complex square root)
stays PyTorch's, called from the host program as an extern. Its complex operands reach it as real
pairs (`view_as_real` layout) and its complex results leave as pairs, so the kernels around it, and
the buffers our memory planner handles, stay real. Each such op gets a custom op of its own,
`fcompile::complex_<op>_<overload>(str call, Tensor?[] tensors) -> Tensor[]`, named after it so the
session shows which op ran in PyTorch. `call` names the exact call (the op, its non-tensor arguments,
which tensors are pairs) in a table of this process; the graph holds only that name.

    out = torch.ops.fcompile.complex__fft_c2c_default(key, [pair])   # fft of a pair, as a pair

The host program calls the op's Python function directly (`host_fcompile_complex__fft_c2c_default_default(
key, [pair])`), without the dispatcher's round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

from compiler_core import _compat

aten = torch.ops.aten

PREFIX = "complex_"


@dataclass(frozen=True)
class Slot:
    """Where the i-th tensor of the call goes among the op's arguments."""

    index: int


@dataclass(frozen=True)
class ComplexCall:
    op: torch._ops.OpOverload
    args: tuple  # the op's arguments with Slot(i) for each tensor
    kwargs: tuple  # (name, value) pairs, likewise
    pairs: frozenset[int]  # tensors given as real pairs, viewed as complex for the call

    @property
    def key(self) -> str:
        return repr((str(self.op), self.args, self.kwargs, sorted(self.pairs)))


_CALLS: dict[str, ComplexCall] = {}
_OPS: dict[str, str] = {}  # custom op name -> the ATen op it calls


def custom_op_for(call: ComplexCall) -> Any:
    """The custom op that makes `call` on pairs (defined once per ATen overload), with the call
    registered under its key."""
    _CALLS[call.key] = call
    name = PREFIX + f"{call.op._schema.name.split('::')[-1]}_{call.op._overloadname}".replace(".", "_")
    if name not in _OPS:
        _define(name)
        _OPS[name] = str(call.op)
    return getattr(torch.ops.fcompile, name).default


def reason(target: Any) -> Optional[str]:
    """The extern reason for one of these custom ops, or None for any other target."""
    op = getattr(target, "_schema", None)
    name = op.name.split("::")[-1] if op is not None else ""
    if not (op is not None and op.name.startswith("fcompile::") and name.startswith(PREFIX)):
        return None
    original = _OPS.get(name, name[len(PREFIX):])
    packet = original.removeprefix("aten.").split(".")[0]
    if packet.startswith(("_fft_", "fft_")):
        return "FFT on complex values runs in PocketFFT/cuFFT (extern call)"
    if packet.startswith(("linalg_", "_linalg_")):
        return "dense linear algebra on complex values runs in LAPACK/cuSOLVER (extern call)"
    return f"no lowering for {original} on complex values: runs in PyTorch"


def _define(name: str) -> None:
    def run(call: str, tensors: list[Optional[torch.Tensor]]) -> list[torch.Tensor]:
        return _run(_CALLS[call], tensors)

    op = torch.library.custom_op(f"fcompile::{name}", run, mutates_args=())
    op.register_fake(run)  # the same code on fake tensors computes the shapes
    # The host program calls `_from_host` itself (ExternCall.host_function): through the dispatcher a
    # call cost 69 µs where the FFT it makes takes 11 (FNet, 2x12x32, 2-core CPU).
    getattr(torch.ops.fcompile, name).default.fcompile_host_function = _from_host


def _from_host(call: str, tensors: list[Optional[torch.Tensor]]) -> list[torch.Tensor]:
    """The call as the host program makes it, outside AOTAutograd's custom-op aliasing check (the
    dispatch mode around a compiled program's first call): as a custom op the call was that mode's
    to handle, and the ops inside ran past it; called directly they would meet it, and inside its
    handler a composite op reads conjugated views as plain ones (_compat.without_custom_op_alias_check)."""
    with _compat.without_custom_op_alias_check():
        return _run(_CALLS[call], tensors)


def _run(call: ComplexCall, tensors: list[Optional[torch.Tensor]]) -> list[torch.Tensor]:
    values = [as_complex(t) if i in call.pairs and t is not None else t for i, t in enumerate(tensors)]

    def fill(template: Any) -> Any:
        if isinstance(template, Slot):
            return values[template.index]
        if isinstance(template, (list, tuple)):
            return type(template)(fill(t) for t in template)
        return template

    with _compat.conjugate_views_dispatched():
        result = call.op(*fill(call.args), **dict(fill(call.kwargs)))
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    converted = []
    for out in outs:
        if out.is_complex():
            out = torch.view_as_real(out.resolve_conj().resolve_neg())
        # A custom op may not return a view of its input: an op returning its operand gets a copy.
        if any(t is not None and _compat.is_alias_of(out, t) for t in tensors):
            out = out.clone()
        converted.append(out)
    return converted


def as_complex(pair: torch.Tensor) -> torch.Tensor:
    """The complex view of a real pair (trailing dimension 2), or of a contiguous copy where its
    strides allow no view."""
    viewable = (pair.stride(-1) == 1 and pair.storage_offset() % 2 == 0
                and all(s % 2 == 0 for s in pair.stride()[:-1]))
    return torch.view_as_complex(pair if viewable else pair.contiguous())
