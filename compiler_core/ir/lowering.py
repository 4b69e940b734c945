"""Lowering: PrimGraph (ATen FX graph with shapes) -> LoopGraph.

Every tensor value is a *view*: a Layout (sizes, strides, offset) over a buffer's storage.  View
ops make no code at all; they only produce a new layout, read from the FakeTensor metadata torch
already computed.  Pointwise and reduction primitives become LoopNodes whose bodies load through
those layouts, so transposed, broadcast (stride 0), sliced (offset) and strided inputs all become
index expressions.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from compiler_core import _compat
from compiler_core.decomp.artifacts import PrimGraph
from compiler_core.ir.graph import Buffer, ExternCall, Layout, LoopGraph, LoopNode, ViewRef
from compiler_core.ir.index import Index, floordiv, linear_index, mod
from compiler_core.ir.values import (
    GATHER_ERROR,
    INDEX_ERROR,
    Cast,
    Constant,
    IndexValue,
    IndirectIndex,
    Load,
    Op,
    Value,
    rebuild,
    subs_index,
)

LOW_PRECISION = (torch.float16, torch.bfloat16)
SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool)


class LoweringError(Exception):
    """This graph cannot be lowered; the caller runs it in eager PyTorch."""


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """bf16/fp16 values are computed in fp32 and rounded once on store."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


def lower(prims: PrimGraph) -> LoopGraph:
    return _Lowering(prims).run()


class _Lowering:
    def __init__(self, prims: PrimGraph):
        self.prims = prims
        self.gm = prims.graph_module
        self.values: dict[str, Any] = {}  # FX node name -> ViewRef | tuple of ViewRef | Python scalar
        self.nodes: list[LoopNode] = []
        self.inputs: list[Buffer] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.device = "cpu"
        self.source_fn = ""
        self.used_names: set[str] = set()
        self.buffer_devices: dict[str, str] = {}  # inputs, constants and extern results on their devices

    def fresh_name(self, wanted: str) -> str:
        """A buffer name no other buffer of this graph has: graph inputs keep their FX names, so an
        input called `buf3` must not meet the buffer the lowering would call `buf3`."""
        name = wanted
        while name in self.used_names:
            name += "_"
        self.used_names.add(name)
        return name

    # ---- driver -------------------------------------------------------------------------
    def run(self) -> LoopGraph:
        self.device = _graph_device(self.gm)
        outputs: tuple = ()
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node)
            elif node.op == "get_attr":
                self._constant(node)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                outputs = tuple(self._output_value(a) for a in _flatten(node.args[0]))
        return LoopGraph(inputs=tuple(self.inputs), nodes=tuple(self.nodes), outputs=outputs,
                         constants=self.constants, device=self.device, values=dict(self.values))

    def _output_value(self, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            return self.values[arg.name]
        return arg

    def _placeholder(self, node: torch.fx.Node) -> None:
        val = _compat.fake_value(node)
        if not isinstance(val, torch.Tensor):
            raise LoweringError(f"input {node.name} is a {type(val).__name__}, not a tensor (dynamic shapes are "
                                "not supported yet: compile with dynamic=False)")
        self._check_dtype(val.dtype, node)
        self.device = val.device.type
        buf = Buffer(self.fresh_name(node.name), val.dtype, Layout(tuple(val.shape), tuple(val.stride()), 0),
                     val.device.type, kind="input")
        self.inputs.append(buf)
        self.values[node.name] = ViewRef(buf.name, buf.layout, buf.dtype)

    def _constant(self, node: torch.fx.Node) -> None:
        tensor = getattr(self.gm, node.target)
        name = self.fresh_name(node.name)
        layout = Layout(tuple(tensor.shape), tuple(tensor.stride()), 0)
        self.constants[name] = tensor
        self.buffer_devices[name] = tensor.device.type
        self.inputs.append(Buffer(name, tensor.dtype, layout, tensor.device.type, kind="constant"))
        self.values[node.name] = ViewRef(name, layout, tensor.dtype)

    def _call(self, node: torch.fx.Node) -> None:
        prim = self.prims.node_prims[node.name]
        if prim == "getitem":
            source, i = node.args
            self.values[node.name] = self.values[source.name][i]
            return
        val = _compat.fake_value(node)
        self.source_fn = _source_fn(node)
        if isinstance(val, torch.Tensor):
            self._check_dtype(val.dtype, node)
        handler = _HANDLERS.get(prim)
        if prim == "view":
            self.values[node.name] = self._view(node, val)
        elif prim == "extern" or handler is None:
            self._extern(node, self.prims.externs.get(node.name, f"no lowering for {prim}"))
        else:
            try:
                self.values[node.name] = handler(self, node, val)
            except _Unsupported as why:
                self._extern(node, f"no lowering for {node.target} with these arguments: {why}")

    def _check_dtype(self, dtype: torch.dtype, node: torch.fx.Node) -> None:
        if dtype not in SUPPORTED_DTYPES:
            raise LoweringError(f"{node.name} has dtype {dtype}, which the code generators do not support")

    # ---- building blocks ----------------------------------------------------------------
    def new_buffer(self, node: torch.fx.Node, val: torch.Tensor) -> Buffer:
        layout = Layout(tuple(val.shape), tuple(val.stride()), 0)
        if not layout.is_dense():
            layout = Layout.contiguous(tuple(val.shape))
        if val.device.type != self.device:
            # A CPU tensor made inside a CUDA graph (a lifted constant, torch.tensor(0.0)): our kernels
            # run on one device, so PyTorch makes it.
            raise _Unsupported(f"its result lives on {val.device.type}, not on the graph's device {self.device}")
        name = self.fresh_name(f"buf{len(self.nodes)}")
        self.buffer_devices[name] = val.device.type
        return Buffer(name, val.dtype, layout, val.device.type)

    def load(self, arg: Any, out_shape: tuple[int, ...], var_names: list[str], dtype: torch.dtype) -> Value:
        """Value of `arg` at the output point named by `var_names`, broadcast, cast to `dtype`."""
        if not isinstance(arg, torch.fx.Node):
            return Constant(_scalar(arg, dtype), dtype)
        view = self.values[arg.name]
        if not isinstance(view, ViewRef):
            raise _Unsupported(f"argument {arg.name} is not a tensor")
        if self.buffer_devices.get(view.buffer, self.device) != self.device:
            raise _Unsupported(f"argument {arg.name} lives on {self.buffer_devices[view.buffer]}, "
                               f"not on the graph's device {self.device}")
        index = broadcast_index(view.layout, out_shape, var_names)
        value: Value = Load(view.buffer, index, view.dtype)
        return value if view.dtype == dtype else Cast(value, dtype)

    def add_node(self, node: LoopNode) -> ViewRef:
        self.nodes.append(dataclasses.replace(node, source_fn=self.source_fn))
        return ViewRef(node.output.name, node.output.layout, node.output.dtype)

    def pointwise(self, node: torch.fx.Node, val: torch.Tensor, body_fn: Callable[[list[str]], Value],
                  origin: str | None = None) -> ViewRef:
        buf = self.new_buffer(node, val)
        names = [f"x{i}" for i in range(val.dim())]
        body = body_fn(names)
        if body.dtype != val.dtype:
            body = Cast(body, val.dtype)
        store = linear_index(names, buf.layout.stride)
        return self.add_node(LoopNode(name=buf.name, kind="pointwise", output=buf, origins=(origin or node.name,),
                                      ranges=tuple(val.shape), body=body, store_index=store))

    def reduction(self, node: torch.fx.Node, val: torch.Tensor, source: Any, dims: list[int], reduction_type: str,
                  acc_dtype: torch.dtype, prologue: Callable[[Value, list[str]], Value] | None = None) -> ViewRef:
        """Reduce `source` over `dims`; `prologue(value, full_var_names)` transforms each element first."""
        view = self.values[source.name]
        full_shape = tuple(view.layout.size)
        ndim = len(full_shape)
        dims = sorted({d % ndim for d in dims}) if ndim else []
        kept = [d for d in range(ndim) if d not in dims]
        full_names = ["" for _ in range(ndim)]
        for k, d in enumerate(kept):
            full_names[d] = f"x{k}"
        for k, d in enumerate(dims):
            full_names[d] = f"r{k}"
        value = self.load(source, full_shape, full_names, acc_dtype)
        if prologue is not None:
            value = prologue(value, full_names)
        if not dims:  # reducing over no dimension (a 0-d input) leaves each element as it is
            return self.pointwise(node, val, lambda names: subs_index(value, {n: Index.var(n) for n in names}, {}))
        buf = self.new_buffer(node, val)
        # Store: keepdim outputs have size-1 dims where the reduced dims were.
        out_names = [f"x{k}" for k in range(len(kept))]
        if val.dim() == ndim:
            store_names = [full_names[d] if d in kept else "" for d in range(ndim)]
            store = linear_index([n for n in store_names if n],
                                 tuple(buf.layout.stride[d] for d in range(ndim) if store_names[d]))
        else:
            store = linear_index(out_names, buf.layout.stride)
        return self.add_node(LoopNode(
            name=buf.name, kind="reduction", output=buf, origins=(node.name,),
            ranges=tuple(full_shape[d] for d in kept), reduction_ranges=tuple(full_shape[d] for d in dims),
            reduction_type=reduction_type, body=value, store_index=store,
            full_shape=full_shape, reduced_dims=tuple(dims)))

    def _view(self, node: torch.fx.Node, val: Any) -> Any:
        base_node = node.args[0]
        base = self.values[base_node.name]
        base_val = _compat.fake_value(base_node)
        if tuple(base.layout.stride) != tuple(base_val.stride()) and base.layout.numel > 1:
            raise LoweringError(f"view {node.name} of {base_node.name}: buffer layout differs from torch's metadata")

        def one(v: torch.Tensor) -> ViewRef:
            offset = base.layout.offset + v.storage_offset() - base_val.storage_offset()
            return ViewRef(base.buffer, Layout(tuple(v.shape), tuple(v.stride()), offset), v.dtype)

        # split / unbind / chunk return several views of one buffer
        return tuple(one(v) for v in val) if isinstance(val, (list, tuple)) else one(val)

    def _extern(self, node: torch.fx.Node, reason: str) -> None:
        def convert(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                v = self.values[a.name]
                if not isinstance(v, (ViewRef, int, float, bool)) and v is not None:
                    raise LoweringError(f"extern {node.name}: argument {a.name} is not a tensor")
                return v
            if isinstance(a, (list, tuple)):
                return type(a)(convert(x) for x in a)
            return a

        args = convert(tuple(node.args))
        kwargs = tuple(sorted((k, convert(v)) for k, v in node.kwargs.items()))
        inputs = tuple(dict.fromkeys(v.buffer for v in _flatten((args, [v for _, v in kwargs]))
                                     if isinstance(v, ViewRef)))
        val = _compat.fake_value(node)
        outs = _flatten(val) if isinstance(val, (list, tuple)) else [val]
        # Besides tensors an op may return None (convolution_backward's output_mask) or a plain number
        # that static shapes fix (cuDNN attention's max_q/max_k): later uses get the number itself.
        if any(v is not None and not isinstance(v, (torch.Tensor, int, float, bool)) for v in outs):
            raise LoweringError(f"extern {node.name} returns symbolic values (dynamic shapes are not supported "
                                "yet: compile with dynamic=False)")
        if not any(isinstance(v, torch.Tensor) for v in outs):
            raise LoweringError(f"extern {node.name} returns no tensor")
        node_name = self.fresh_name(f"buf{len(self.nodes)}")
        buffers, slots = [], []
        for i, v in enumerate(outs):
            if not isinstance(v, torch.Tensor):
                slots.append(None)
                continue
            name = node_name if len(outs) == 1 else self.fresh_name(f"{node_name}_{i}")
            buffers.append(Buffer(name, v.dtype, Layout(tuple(v.shape), tuple(v.stride()), 0), v.device.type,
                                  kind="extern"))
            self.buffer_devices[name] = v.device.type
            slots.append(name)
        target = node.target
        # torch.ops.<target> is how the host program calls it: a higher-order op prints as its bare name
        name = f"{target.namespace}.{target.name()}" if isinstance(target, torch._ops.HigherOrderOperator) \
            else str(target)
        call = ExternCall(target=name, op=node.target, args=args, kwargs=kwargs, reason=reason)
        self.nodes.append(LoopNode(name=node_name, kind="extern", output=buffers[0],
                                   origins=(node.name,), extern=call, extern_inputs=inputs,
                                   extra_outputs=tuple(buffers[1:]),
                                   result_slots=tuple(slots) if isinstance(val, (list, tuple)) else (),
                                   may_alias=_aliased_inputs(node, args, kwargs), source_fn=self.source_fn))
        by_name = {b.name: ViewRef(b.name, b.layout, b.dtype) for b in buffers}
        refs = tuple(v if slot is None else by_name[slot] for v, slot in zip(outs, slots))
        self.values[node.name] = refs if isinstance(val, (list, tuple)) else refs[0]


def _aliased_inputs(node: torch.fx.Node, args: tuple, kwargs: tuple) -> tuple[str, ...]:
    """Input buffers an extern call's outputs may share storage with.

    The schema says so with alias annotations (`Tensor(a) self -> Tensor(a)`); an op without a
    schema (a Python function, a higher-order op) may alias any tensor input.  ATen ops that return
    a view without saying so are classified as views before they get here (decomp.table)."""
    def buffers_of(value: Any) -> list[str]:
        return [v.buffer for v in _flatten(value) if isinstance(v, ViewRef)]

    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return tuple(dict.fromkeys(buffers_of((args, [v for _, v in kwargs]))))
    returned = [set(r.alias_info.before_set) for r in schema.returns if r.alias_info is not None]
    if not returned:
        return ()
    alias_sets = set().union(*returned)
    bound = dict(kwargs)
    aliased: list[str] = []
    for i, arg in enumerate(schema.arguments):
        info = arg.alias_info
        # An empty set is a wildcard (`Tensor(a)[]` returns a list of unnamed aliases): match any.
        if info is None or (alias_sets and not (set(info.before_set) & alias_sets)):
            continue
        value = args[i] if i < len(args) else bound.get(arg.name)
        aliased += buffers_of(value)
    return tuple(dict.fromkeys(aliased))


def _graph_device(gm: torch.fx.GraphModule) -> str:
    """The device our kernels run on: the inputs' (the backend refuses graphs whose inputs are on two
    devices), or for a graph without tensor inputs the device of the first tensor it makes."""
    made = None
    for node in gm.graph.nodes:
        val = _compat.fake_value(node)
        if isinstance(val, torch.Tensor):
            if node.op == "placeholder":
                return val.device.type
            made = made or val.device.type
    return made or "cpu"


def _source_fn(node: torch.fx.Node) -> str:
    """The user-level function an ATen node was traced from (Dynamo's source_fn_stack)."""
    stack = node.meta.get("source_fn_stack")
    if stack:
        name = stack[-1][0]
        target = stack[-1][1]
        return getattr(target, "__name__", None) or str(name).rstrip("0123456789_") or str(name)
    return getattr(node.target, "__name__", str(node.target)).split(".")[0]


class _Unsupported(Exception):
    """This op's arguments are outside what the lowering handles: make it an extern call."""


def _flatten(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _scalar(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _Unsupported("symbolic scalar")
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


def broadcast_index(layout: Layout, out_shape: tuple[int, ...], var_names: list[str]) -> Index:
    """Flat offset of the element of a (broadcast) view that lines up with an output point."""
    index = Index.of(layout.offset)
    lead = len(out_shape) - len(layout.size)
    for d, (size, stride) in enumerate(zip(layout.size, layout.stride)):
        name = var_names[lead + d]
        if size != 1 and name:
            index = index + Index.var(name) * stride
    return index


# ---- pointwise handlers --------------------------------------------------------------------
def _elementwise(prim: str, arity: int) -> Callable:
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        args = list(node.args[:arity])
        if len(args) != arity:
            raise _Unsupported(f"expected {arity} arguments")
        alpha = node.kwargs.get("alpha", 1)
        cdt = compute_dtype(val.dtype)
        if prim in ("floordiv", "truncdiv", "remainder", "maximum", "minimum", "add", "sub", "mul", "neg",
                    "abs", "sign", "truediv", "fmod"):
            operand_dtype = cdt
        else:
            operand_dtype = cdt if cdt.is_floating_point else torch.float32

        def body(names: list[str]) -> Value:
            vals = [lw.load(a, tuple(val.shape), names, operand_dtype) for a in args]
            if alpha != 1 and prim in ("add", "sub"):
                vals[1] = Op("mul", (vals[1], Constant(_scalar(alpha, operand_dtype), operand_dtype)), operand_dtype)
            return Op(prim, tuple(vals), operand_dtype)

        return lw.pointwise(node, val, body)

    return handler


def _compare(prim: str) -> Callable:
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        a, b = node.args[:2]
        cdt = compute_dtype(torch.result_type(*(_meta_or_scalar(x) for x in (a, b))))

        def body(names: list[str]) -> Value:
            return Op(prim, (lw.load(a, tuple(val.shape), names, cdt), lw.load(b, tuple(val.shape), names, cdt)),
                      torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def _logical(prim: str, arity: int) -> Callable:
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        if val.dtype != torch.bool:
            raise _Unsupported("bitwise ops on integers")

        def body(names: list[str]) -> Value:
            vals = tuple(lw.load(a, tuple(val.shape), names, torch.bool) for a in node.args[:arity])
            return Op(prim, vals, torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def _bitwise(prim: str, arity: int) -> Callable:
    """bitwise_* on integers; on bools the logical op of the same name (a bool is 0 or 1)."""
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        if val.dtype == torch.bool:
            return _logical(prim.replace("bitwise_", "logical_"), arity)(lw, node, val)
        if val.dtype.is_floating_point:
            raise _Unsupported("bitwise ops on floats raise in eager PyTorch")

        def body(names: list[str]) -> Value:
            vals = tuple(lw.load(a, tuple(val.shape), names, val.dtype) for a in node.args[:arity])
            return Op(prim, vals, val.dtype)

        return lw.pointwise(node, val, body)

    return handler


def _logical_any(prim: str) -> Callable:
    """logical_xor of any dtypes: each operand is true when nonzero (NaN included)."""
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        def body(names: list[str]) -> Value:
            vals = tuple(lw.load(a, tuple(val.shape), names, torch.bool) for a in node.args[:2])
            return Op(prim, vals, torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def _float_test(kind: str) -> Callable:
    """isinf / isposinf / isneginf / signbit: a bool from one operand; integers are never infinite,
    and an integer's sign bit is set when it is negative."""
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        x = node.args[0]
        src = _meta_or_scalar(x).dtype
        shape = tuple(val.shape)
        if not src.is_floating_point:
            if kind == "signbit" and src.is_signed and src != torch.bool:
                return lw.pointwise(node, val, lambda names: Op("lt", (lw.load(x, shape, names, src),
                                                                       Constant(0, src)), torch.bool))
            return lw.pointwise(node, val, lambda names: Constant(False, torch.bool))
        cdt = compute_dtype(src)
        inf = Constant(float("inf"), cdt)

        def body(names: list[str]) -> Value:
            v = lw.load(x, shape, names, cdt)
            if kind == "signbit":
                return Op("signbit", (v,), torch.bool)
            if kind == "isinf":
                return Op("eq", (Op("abs", (v,), cdt), inf), torch.bool)
            if kind == "isposinf":
                return Op("eq", (v, inf), torch.bool)
            return Op("eq", (v, Constant(float("-inf"), cdt)), torch.bool)

        return lw.pointwise(node, val, body)

    return handler


def _fmax_fmin(prim: str) -> Callable:
    """fmax/fmin: like maximum/minimum, but a NaN operand loses to a number (NaN only if both are)."""
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        cdt = compute_dtype(val.dtype)
        a, b = node.args[:2]

        def body(names: list[str]) -> Value:
            x, y = (lw.load(v, tuple(val.shape), names, cdt) for v in (a, b))
            both = Op(prim, (x, y), cdt)
            if not cdt.is_floating_point:
                return both
            return Op("where", (Op("isnan", (x,), torch.bool), y,
                                Op("where", (Op("isnan", (y,), torch.bool), x, both), cdt)), cdt)

        return lw.pointwise(node, val, body)

    return handler


def _meta_or_scalar(x: Any) -> Any:
    return _compat.fake_value(x) if isinstance(x, torch.fx.Node) else x


def _isnan(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    x = node.args[0]
    src = _meta_or_scalar(x).dtype
    if not src.is_floating_point:
        return lw.pointwise(node, val, lambda names: Constant(False, torch.bool))
    return lw.pointwise(node, val, lambda names: Op("isnan", (lw.load(x, tuple(val.shape), names,
                                                                      compute_dtype(src)),), torch.bool))


def _where(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    cond, a, b = node.args
    cdt = compute_dtype(val.dtype)

    def body(names: list[str]) -> Value:
        shape = tuple(val.shape)
        return Op("where", (lw.load(cond, shape, names, torch.bool), lw.load(a, shape, names, cdt),
                            lw.load(b, shape, names, cdt)), cdt)

    return lw.pointwise(node, val, body)


def _clamp(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    x = node.args[0]
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    cdt = compute_dtype(val.dtype)

    def body(names: list[str]) -> Value:
        v = lw.load(x, tuple(val.shape), names, cdt)
        if lo is not None:
            v = Op("maximum", (v, lw.load(lo, tuple(val.shape), names, cdt)), cdt)
        if hi is not None:
            v = Op("minimum", (v, lw.load(hi, tuple(val.shape), names, cdt)), cdt)
        return v

    return lw.pointwise(node, val, body)


def _relu_or_maximum(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    if node.target is torch.ops.aten.relu.default:
        cdt = compute_dtype(val.dtype)
        x = node.args[0]
        return lw.pointwise(node, val, lambda names: Op(
            "maximum", (lw.load(x, tuple(val.shape), names, cdt), Constant(_scalar(0, cdt), cdt)), cdt))
    return _elementwise("maximum", 2)(lw, node, val)


def _pow(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    base, exponent = node.args[:2]
    cdt = compute_dtype(val.dtype)
    if isinstance(base, torch.fx.Node) and isinstance(exponent, (int, float)) and float(exponent) in (
            0.5, -0.5, 1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.0):
        e = float(exponent)

        def body(names: list[str]) -> Value:
            x = lw.load(base, tuple(val.shape), names, cdt)
            if e == 0.5:
                return Op("sqrt", (x,), cdt)
            if e == -0.5:
                return Op("rsqrt", (x,), cdt)
            if e == 0.0:
                return Constant(_scalar(1, cdt), cdt)
            result = x
            for _ in range(int(abs(e)) - 1):
                result = Op("mul", (result, x), cdt)
            return Op("reciprocal", (result,), cdt) if e < 0 else result

        if e < 0 and not cdt.is_floating_point:
            raise _Unsupported("negative integer power of an integer raises in eager PyTorch")
        return lw.pointwise(node, val, body)
    if val.dtype == torch.bool or (not cdt.is_floating_point and isinstance(exponent, (int, float))
                                   and not isinstance(exponent, bool) and exponent < 0):
        raise _Unsupported("a bool power, or a negative scalar power of an integer (raises in eager PyTorch)")
    if any(isinstance(a, (torch.SymInt, torch.SymFloat)) for a in (base, exponent)):
        raise _Unsupported("symbolic scalar")
    return lw.pointwise(node, val, lambda names: Op("pow", tuple(lw.load(a, tuple(val.shape), names, cdt)
                                                                 for a in (base, exponent)), cdt))


def _fma(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """prims.fma(a, b, c) = a * b + c. torch's decompositions emit it (addcmul in Adam's second moment,
    lerp); a multiply and an add, rounded twice, as eager's CPU kernels compute it: no new primitive."""
    a, b, c = node.args[:3]
    cdt = compute_dtype(val.dtype)

    def body(names: list[str]) -> Value:
        x, y, z = (lw.load(v, tuple(val.shape), names, cdt) for v in (a, b, c))
        return Op("add", (Op("mul", (x, y), cdt), z), cdt)

    return lw.pointwise(node, val, body)


def _round(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """round(x, decimals) as ATen computes it: scale by 10**|decimals|, round half to even, unscale."""
    x = node.args[0]
    decimals = node.args[1] if len(node.args) > 1 else node.kwargs.get("decimals", 0)
    cdt = compute_dtype(val.dtype)
    if not cdt.is_floating_point:
        return lw.pointwise(node, val, lambda names: lw.load(x, tuple(val.shape), names, cdt))
    scale = Constant(float(10 ** abs(int(decimals))), cdt)

    def body(names: list[str]) -> Value:
        v = lw.load(x, tuple(val.shape), names, cdt)
        if decimals == 0:
            return Op("round", (v,), cdt)
        if decimals < 0:
            return Op("mul", (Op("round", (Op("truediv", (v, scale), cdt),), cdt), scale), cdt)
        return Op("truediv", (Op("round", (Op("mul", (v, scale), cdt),), cdt), scale), cdt)

    return lw.pointwise(node, val, body)


def _cast(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    device = node.kwargs.get("device")
    if device is not None and torch.device(device).type != lw.device:
        raise _Unsupported("device transfer")
    x = node.args[0]
    return lw.pointwise(node, val, lambda names: lw.load(x, tuple(val.shape), names, val.dtype))


def _copy(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    # clone(x) / copy(dst, src): the source broadcast to the output shape and dtype.
    src = node.args[1] if node.target is torch.ops.aten.copy.default else node.args[0]
    return lw.pointwise(node, val, lambda names: lw.load(src, tuple(val.shape), names, val.dtype))


def _fill(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    target = node.target
    if target in (torch.ops.aten.full.default,):
        value = node.args[1]
    elif target in (torch.ops.aten.zeros.default,):
        value = 0
    elif target in (torch.ops.aten.ones.default,):
        value = 1
    elif target is torch.ops.aten.scalar_tensor.default:
        value = node.args[0]
    elif target in (torch.ops.aten.fill.Scalar, torch.ops.aten.full_like.default):
        value = node.args[1]
    elif target in (torch.ops.aten.empty.memory_format, torch.ops.aten.empty_like.default,
                    torch.ops.aten.new_empty.default, torch.ops.aten.zero.default):
        value = 0  # uninitialized memory may hold anything: zeros, made by a kernel that fuses
    else:
        raise _Unsupported("fill variant")
    if isinstance(value, torch.fx.Node):
        raise _Unsupported("fill with a tensor value")
    return lw.pointwise(node, val, lambda names: Constant(_scalar(value, val.dtype), val.dtype))


def _arange(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    args = list(node.args)
    if node.target is torch.ops.aten.arange.default:
        start, step = 0, 1
    elif node.target is torch.ops.aten.arange.start:
        start, step = args[0], 1
    elif node.target is torch.ops.aten.arange.start_step:
        start, step = args[0], args[2]
    elif node.target is torch.ops.prims.iota.default:
        start, step = node.kwargs["start"], node.kwargs["step"]
    else:
        raise _Unsupported("arange variant")
    cdt = compute_dtype(val.dtype)

    def body(names: list[str]) -> Value:
        position = Cast(IndexValue(Index.var(names[0]), torch.int64), cdt)
        return Op("add", (Op("mul", (position, Constant(_scalar(step, cdt), cdt)), cdt),
                          Constant(_scalar(start, cdt), cdt)), cdt)

    return lw.pointwise(node, val, body)


# ---- index-arithmetic handlers: each output element reads one input element -----------------
def _read_at(lw: _Lowering, arg: Any, shape: tuple[int, ...], names: list[str], dtype: torch.dtype,
             moved: dict[str, Index], mask: Value | None = None) -> Value:
    """`arg` loaded at the output point whose loop variables are replaced by `moved`, guarded by
    `mask` (a bool value: where it is false the index may be outside the input, and nothing is read)."""
    value = lw.load(arg, shape, names, dtype)

    def leaf(v: Value) -> Value:
        if isinstance(v, Load):
            return dataclasses.replace(v, index=v.index.subs(moved), mask=mask)
        return v

    return rebuild(value, leaf)


def _position(name: str) -> Value:
    return IndexValue(Index.var(name), torch.int64)


def _all(conditions: list[Value]) -> Value | None:
    out = None
    for c in conditions:
        out = c if out is None else Op("logical_and", (out, c), torch.bool)
    return out


def _within(name: str, lo: int | None, hi: int | None) -> list[Value]:
    """lo <= name < hi, as bool values (None: no bound on that side)."""
    out = []
    if lo is not None:
        out.append(Op("ge", (_position(name), Constant(lo, torch.int64)), torch.bool))
    if hi is not None:
        out.append(Op("lt", (_position(name), Constant(hi, torch.int64)), torch.bool))
    return out


def _cat(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """Each input fills a band of the output along `dim`: a chain of selects over masked loads."""
    tensors = list(node.args[0])
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if val.dim() == 0 or not all(isinstance(t, torch.fx.Node) for t in tensors):
        raise _Unsupported("cat of non-tensors")
    dim %= val.dim()
    parts, start = [], 0
    for t in tensors:
        meta = _compat.fake_value(t)
        if meta.dim() != val.dim():  # legacy: 1-D empty tensors are skipped by cat
            continue
        if meta.shape[dim]:
            parts.append((t, start, meta.shape[dim]))
        start += meta.shape[dim]
    cdt = compute_dtype(val.dtype)
    shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        name = names[dim]
        result: Value | None = None
        for t, begin, size in reversed(parts):
            end = begin + size
            inside = _all(_within(name, begin if begin else None, end if end < shape[dim] else None))
            part = _read_at(lw, t, shape, names, cdt, {name: Index.var(name) - begin}, inside)
            result = part if result is None else Op("where", (inside, part, result), cdt)
        return result if result is not None else Constant(_scalar(0, cdt), cdt)

    return lw.pointwise(node, val, body)


def _constant_pad(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """constant_pad_nd: the input shifted by the leading pads, `value` outside it (negative pads crop)."""
    x, pad = node.args[0], list(node.args[1])
    fill = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    in_shape = tuple(_compat.fake_value(x).shape)
    cdt = compute_dtype(val.dtype)
    shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        moved, conditions = {}, []
        for k in range(len(pad) // 2):
            d = len(shape) - 1 - k
            before, after = pad[2 * k], pad[2 * k + 1]
            moved[names[d]] = Index.var(names[d]) - before
            conditions += _within(names[d], before if before > 0 else None,
                                  before + in_shape[d] if after > 0 else None)
        inside = _all(conditions)
        value = _read_at(lw, x, shape, names, cdt, moved, inside)
        if inside is None:
            return value
        return Op("where", (inside, value, Constant(_scalar(fill, cdt), cdt)), cdt)

    return lw.pointwise(node, val, body)


def _flip(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    x, dims = node.args[0], node.args[1]
    shape = tuple(val.shape)
    dims = {d % max(len(shape), 1) for d in dims}

    def body(names: list[str]) -> Value:
        moved = {names[d]: Index.of(shape[d] - 1) - Index.var(names[d]) for d in dims}
        return _read_at(lw, x, shape, names, val.dtype, moved)

    return lw.pointwise(node, val, body)


def _roll(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """roll: output[i] = input[(i - shift) mod n] along each dim, or over the flattened tensor."""
    x = node.args[0]
    shifts = list(node.args[1]) if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
    dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dims", [])
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    shape = tuple(val.shape)
    if val.numel() == 0:
        return _copy(lw, node, val)

    def body(names: list[str]) -> Value:
        ranges = dict(zip(names, shape))
        if not dims:  # flattened: the flat position moves, then splits back into dims
            flat = linear_index(names, _contiguous_strides(shape))
            numel = val.numel()
            source = mod(flat + (numel - shifts[0] % numel), numel, ranges)
            moved = {}
            for d, stride in enumerate(_contiguous_strides(shape)):
                moved[names[d]] = mod(floordiv(source, stride, ranges), shape[d], ranges)
            return _read_at(lw, x, shape, names, val.dtype, moved)
        moved = {}
        for shift, d in zip(shifts, dims):
            d %= len(shape)
            n = shape[d]
            moved[names[d]] = mod(Index.var(names[d]) + (n - shift % n), n, ranges)
        return _read_at(lw, x, shape, names, val.dtype, moved)

    return lw.pointwise(node, val, body)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running *= max(size, 1)
    return tuple(reversed(strides))


# ---- indirect loads: positions read from an index tensor ------------------------------------
_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8)


def _indirect_read(lw: _Lowering, src: Any, names: dict[int, str], positions: dict[int, Value],
                   error: int, wrap: bool) -> Value:
    """`src` read at loop variables `names` (source dim -> variable) in some dims and at `positions`
    (source dim -> int64 value loaded from an index tensor) in the others."""
    view = lw.values[src.name]
    if not isinstance(view, ViewRef):
        raise _Unsupported(f"argument {src.name} is not a tensor")
    if lw.buffer_devices.get(view.buffer, lw.device) != lw.device:
        raise _Unsupported(f"argument {src.name} lives on {lw.buffer_devices[view.buffer]}")
    index = Index.of(view.layout.offset)
    for d, name in names.items():
        index = index + Index.var(name) * view.layout.stride[d]
    terms = tuple(IndirectIndex(positions[d], view.layout.size[d], view.layout.stride[d], error, wrap)
                  for d in sorted(positions))
    return Load(view.buffer, index, view.dtype, indirect=terms)


def _positions(lw: _Lowering, index: Any, shape: tuple[int, ...], names: list[str]) -> Value:
    """An index tensor's element at the output point (broadcast to `shape`), as int64."""
    if not isinstance(index, torch.fx.Node) or _compat.fake_value(index).dtype not in _INDEX_DTYPES:
        raise _Unsupported("indices that are not an integer tensor (a bool mask selects a data-dependent number "
                           "of elements)")
    return lw.load(index, shape, names, torch.int64)


def _source_dim(node: torch.fx.Node, dim: int) -> tuple[Any, int]:
    src = node.args[0]
    ndim = _compat.fake_value(src).dim()
    if ndim == 0:
        raise _Unsupported("indexing a 0-d tensor")
    return src, dim % ndim


def _gather(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """gather(src, dim, index): out[..., i, ...] = src[..., index[..., i, ...], ...] along `dim`."""
    src, dim = _source_dim(node, node.args[1])
    index, shape = node.args[2], tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, index, shape, names)
        others = {d: n for d, n in enumerate(names) if d != dim}
        return _indirect_read(lw, src, others, {dim: pos}, GATHER_ERROR, wrap=False)

    return lw.pointwise(node, val, body)


def _index_select(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """index_select(src, dim, index): the slices of src at the positions of the 1-d `index`."""
    src, dim = _source_dim(node, node.args[1])
    index, shape = node.args[2], tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, index, (shape[dim],), [names[dim]])
        others = {d: n for d, n in enumerate(names) if d != dim}
        return _indirect_read(lw, src, others, {dim: pos}, INDEX_ERROR, wrap=False)

    return lw.pointwise(node, val, body)


def _embedding(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """embedding(weight, indices): out[i..., j] = weight[indices[i...], j] (padding_idx only matters to
    the backward)."""
    weight, indices = node.args[:2]
    if _compat.fake_value(weight).dim() != 2:
        raise _Unsupported("an embedding weight that is not 2-d")
    shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, indices, shape[:-1], names[:-1])
        return _indirect_read(lw, weight, {1: names[-1]}, {0: pos}, INDEX_ERROR, wrap=False)

    return lw.pointwise(node, val, body)


def _take(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """take(src, index): src as a flat tensor, read at `index`; a flat position is one strided step
    only when src is contiguous (or has at most one dim of more than one element)."""
    src, index = node.args[:2]
    view = lw.values[src.name]
    if not isinstance(view, ViewRef):
        raise _Unsupported(f"argument {src.name} is not a tensor")
    sizes = [(size, stride) for size, stride in zip(view.layout.size, view.layout.stride) if size != 1]
    if len(sizes) > 1 and view.layout.stride != Layout.contiguous(view.layout.size).stride:
        raise _Unsupported("take from a non-contiguous tensor: a flat position maps to several strided dims")
    stride = sizes[-1][1] if sizes else 1
    flat = ViewRef(view.buffer, Layout((view.layout.numel,), (stride,), view.layout.offset), view.dtype)
    shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        pos = _positions(lw, index, shape, names)
        index_ = Index.of(flat.layout.offset)
        return Load(flat.buffer, index_, flat.dtype,
                    indirect=(IndirectIndex(pos, flat.layout.size[0], stride, INDEX_ERROR, wrap=True),))

    return lw.pointwise(node, val, body)


def _index_tensor(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
    """index.Tensor / _unsafe_index (src[i, :, j] with tensor indices): the index tensors broadcast to
    one shape B; if the indexed dims are adjacent, B's dims replace them in place, else they lead."""
    src, indices = node.args[0], list(node.args[1])
    src_shape = tuple(_compat.fake_value(src).shape)
    indexed = [d for d, i in enumerate(indices) if i is not None]
    if not indexed or len(indices) > len(src_shape):
        raise _Unsupported("no tensor index")
    metas = [_compat.fake_value(indices[d]) for d in indexed]
    if any(not isinstance(m, torch.Tensor) or m.dtype not in _INDEX_DTYPES for m in metas):
        raise _Unsupported("bool mask indices (a data-dependent number of elements)")
    b_shape = tuple(torch.broadcast_shapes(*(m.shape for m in metas)))
    rest = [d for d in range(len(src_shape)) if d not in indexed]
    adjacent = indexed == list(range(indexed[0], indexed[-1] + 1))
    b_start = indexed[0] if adjacent else 0
    before = [d for d in rest if adjacent and d < indexed[0]]
    after = [d for d in rest if d not in before]
    expected = tuple(src_shape[d] for d in before) + b_shape + tuple(src_shape[d] for d in after)
    if expected != tuple(val.shape):
        raise _Unsupported(f"result shape {tuple(val.shape)} is not the expected {expected}")
    nb = len(b_shape)

    def body(names: list[str]) -> Value:
        b_names = names[b_start:b_start + nb]
        free = {d: names[k] for k, d in enumerate(before)}
        free.update({d: names[len(before) + nb + k] for k, d in enumerate(after)})
        positions = {d: _positions(lw, indices[d], b_shape, b_names) for d in indexed}
        return _indirect_read(lw, src, free, positions, INDEX_ERROR, wrap=True)

    return lw.pointwise(node, val, body)


# ---- reduction handlers --------------------------------------------------------------------
def _reduction_dims(node: torch.fx.Node) -> list[int] | None:
    if len(node.args) > 1 and node.args[1] is not None:
        dims = node.args[1]
        return [dims] if isinstance(dims, int) else list(dims)
    dims = node.kwargs.get("dim")
    if dims is None:
        return None
    return [dims] if isinstance(dims, int) else list(dims)


def _reduce(kind: str) -> Callable:
    def handler(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        source = node.args[0]
        src_val = _compat.fake_value(source)
        dims = _reduction_dims(node)
        if dims is None or len(dims) == 0:
            dims = list(range(src_val.dim()))
        acc = compute_dtype(val.dtype)
        if kind in ("sum", "prod", "amax", "amin"):
            return lw.reduction(node, val, source, dims, kind, acc)
        if kind == "mean":
            count = 1
            for d in dims:
                count *= src_val.shape[d % max(src_val.dim(), 1)] if src_val.dim() else 1
            total = lw.reduction(node, val, source, dims, "sum", acc)
            return _scale(lw, node, val, total, 1.0 / max(count, 1) if count else float("nan"))
        if kind == "var":
            correction = node.args[2] if len(node.args) > 2 else node.kwargs.get("correction", 1)
            return _variance(lw, node, val, source, dims, correction)
        raise _Unsupported(kind)

    return handler


def _scale(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor, source: ViewRef, factor: float) -> ViewRef:
    cdt = compute_dtype(val.dtype)
    names_shape = tuple(val.shape)

    def body(names: list[str]) -> Value:
        load = Load(source.buffer, broadcast_index(source.layout, names_shape, names), source.dtype)
        value = load if source.dtype == cdt else Cast(load, cdt)
        return Op("mul", (value, Constant(factor, cdt)), cdt)

    return lw.pointwise(node, val, body, origin=node.name)


def _variance(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor, source: torch.fx.Node, dims: list[int],
              correction: Any) -> ViewRef:
    """var = sum((x - mean)^2) / (n - correction), as two reductions that share one kernel."""
    src_val = _compat.fake_value(source)
    ndim = src_val.dim()
    dims = sorted({d % ndim for d in dims})
    count = 1
    for d in dims:
        count *= src_val.shape[d]
    acc = compute_dtype(val.dtype)
    total = lw.reduction(node, val, source, dims, "sum", acc)
    mean = _scale(lw, node, val, total, 1.0 / count)
    kept = [d for d in range(ndim) if d not in dims]

    def centered_square(value: Value, full_names: list[str]) -> Value:
        kept_names = [full_names[d] for d in kept]
        m = Load(mean.buffer, broadcast_index(mean.layout, tuple(val.shape), kept_names[-val.dim():] if val.dim()
                                              else []), mean.dtype)
        diff = Op("sub", (value, m if mean.dtype == acc else Cast(m, acc)), acc)
        return Op("mul", (diff, diff), acc)

    squares = lw.reduction(node, val, source, dims, "sum", acc, prologue=centered_square)
    denominator = count - float(correction or 0)
    return _scale(lw, node, val, squares, 1.0 / denominator if denominator > 0 else float("inf"))


def _on_the_cpu_only(handler: Callable) -> Callable:
    """Tensor-indexed loads run as our kernels on the CPU (C++, and Triton's interpreter) only, for now.
    On a GPU they have not run compiled yet, and an out-of-range index there would read element 0
    without a word where eager raises: until both are settled, CUDA graphs keep the extern call."""
    def guarded(lw: _Lowering, node: torch.fx.Node, val: torch.Tensor) -> ViewRef:
        if lw.device == "cuda":
            raise _Unsupported("tensor-indexed loads are not compiled for CUDA yet (out-of-range indices would "
                               "not raise there)")
        return handler(lw, node, val)
    return guarded


_HANDLERS: dict[str, Callable] = {
    **{p: _elementwise(p, 2) for p in ("add", "sub", "mul", "truediv", "floordiv", "truncdiv", "remainder",
                                        "minimum")},
    **{p: _elementwise(p, 1) for p in ("neg", "abs", "reciprocal", "exp", "log", "log1p", "expm1", "sqrt",
                                        "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid", "floor", "ceil", "trunc",
                                        "sign")},
    "round": _round,
    **{p: _compare(p) for p in ("eq", "ne", "lt", "le", "gt", "ge")},
    "logical_not": _logical("logical_not", 1), "logical_and": _logical("logical_and", 2),
    "logical_or": _logical("logical_or", 2), "isnan": _isnan, "where": _where, "clamp": _clamp,
    "maximum": _relu_or_maximum, "pow": _pow, "fma": _fma, "cast": _cast, "copy": _copy, "fill": _fill,
    "index": _arange,
    **{p: _elementwise(p, 2) for p in ("atan2", "hypot", "fmod", "copysign")},
    **{p: _elementwise(p, 1) for p in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                        "log2", "log10", "exp2", "erfc")},
    **{p: _bitwise(p, 2) for p in ("bitwise_and", "bitwise_or", "bitwise_xor")},
    "bitwise_not": _bitwise("bitwise_not", 1), "logical_xor": _logical_any("logical_xor"),
    **{k: _float_test(k) for k in ("isinf", "isposinf", "isneginf", "signbit")},
    "fmax": _fmax_fmin("maximum"), "fmin": _fmax_fmin("minimum"),
    "cat": _cat, "constant_pad": _constant_pad, "flip": _flip, "roll": _roll,
    **{k: _on_the_cpu_only(h) for k, h in (("gather", _gather), ("index_select", _index_select),
                                             ("embedding", _embedding), ("take", _take),
                                             ("index_tensor", _index_tensor))},
    **{k: _reduce(k) for k in ("sum", "mean", "amax", "amin", "prod", "var")},
}
