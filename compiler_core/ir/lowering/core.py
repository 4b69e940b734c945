"""Lowering: PrimGraph (ATen FX graph with shapes) -> LoopGraph: the walk over the graph, views,
extern calls, and the helpers every handler uses. The handlers per primitive are in the sibling
modules; `handlers.py` maps primitive names to them."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import sympy
import torch

from compiler_core import _compat
from compiler_core.decomp.artifacts import PrimGraph
from compiler_core.ir.graph import Buffer, ExternCall, Layout, LoopGraph, LoopNode, ViewRef
from compiler_core.ir.index import Index, linear_index
from compiler_core.ir.lowering.views import NotAViewOfOurs, equal_sizes, restride
from compiler_core.ir.symbolic import SizeRatio, as_size, decide, example_values, hint, known
from compiler_core.ir.values import (
    Cast,
    Constant,
    IndexValue,
    Load,
    Op,
    Value,
    subs_index,
)

# Views whose arguments are strides and offsets in torch's layout: they cannot be re-applied to ours.
STRIDED_VIEWS = {torch.ops.aten.as_strided.default}

LOW_PRECISION = (torch.float16, torch.bfloat16)
SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool)


class LoweringError(Exception):
    """This graph cannot be lowered; the caller runs it in eager PyTorch."""


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """bf16/fp16 values are computed in fp32 and rounded once on store."""
    return torch.float32 if dtype in LOW_PRECISION else dtype


class Lowering:
    """One graph's lowering; `handlers` (handlers.py) map each primitive to the function that lowers it."""

    def __init__(self, prims: PrimGraph, handlers: dict[str, Callable], updates: tuple[tuple[str, int], ...] = ()):
        self.prims = prims
        self.handlers = handlers
        self.gm = prims.graph_module
        # FX node -> the input placeholder it is the new value of, where that node reads the input and
        # nothing else does (scatter.py stores into such an input instead of a copy of it).
        self.sole_updates = _sole_updates(self.gm, updates)
        self.values: dict[str, Any] = {}  # FX node name -> ViewRef | tuple of ViewRef | Python scalar
        self.nodes: list[LoopNode] = []
        self.inputs: list[Buffer] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.device = "cpu"
        self.source_fn = ""
        self.used_names: set[str] = set()
        self.buffer_devices: dict[str, str] = {}  # inputs, constants and extern results on their devices
        # 0-d constants on the host in a graph of another device (a lifted torch.tensor(0) in a CUDA graph):
        # buffer -> value. Known when compiling, so the kernels read them as literals (PyTorch lets a CPU
        # scalar tensor meet CUDA tensors in one op; our kernels cannot read host memory).
        self.host_scalars: dict[str, bool | int | float] = {}
        # Symbolic sizes: the arguments in order (tensors and sizes), and where each symbol is read.
        self.arg_names: list[str] = []
        self.size_bindings: dict[str, tuple[str, str, str, int]] = {}

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
        symbolic = bool(self.size_bindings) or len(self.arg_names) != len([b for b in self.inputs if b.kind == "input"])
        return LoopGraph(inputs=tuple(self.inputs), nodes=tuple(self.nodes), outputs=outputs,
                         constants=self.constants, device=self.device, values=dict(self.values),
                         arg_names=tuple(self.arg_names) if symbolic else (),
                         size_bindings=tuple(self.size_bindings.values()),
                         size_hints=example_values() if symbolic else {})

    def _output_value(self, arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node):
            return self.values[arg.name]
        return arg

    def _placeholder(self, node: torch.fx.Node) -> None:
        val = _compat.fake_value(node)
        if isinstance(val, torch.SymInt):  # a size Dynamo passes as an int: the host binds its symbol
            self.values[node.name] = as_size(val)
            self.arg_names.append(node.name)
            self._bind(self.values[node.name], node.name, "value", 0)
            return
        if isinstance(val, torch.SymFloat):  # a saved float of sizes (n / (n - 1)): computed from the sizes
            self.values[node.name] = _size_float(node.name, val.node.expr)
            self.arg_names.append(node.name)
            return
        if not isinstance(val, torch.Tensor):
            raise LoweringError(f"input {node.name} is a {type(val).__name__}, not a tensor")
        self._check_dtype(val.dtype, node)
        self.device = val.device.type
        buf = Buffer(self.fresh_name(node.name), val.dtype, Layout(tuple(val.shape), tuple(val.stride()), 0),
                     val.device.type, kind="input")
        self.inputs.append(buf)
        self.arg_names.append(buf.name)
        for d, (size, stride) in enumerate(zip(buf.layout.size, buf.layout.stride)):
            self._bind(size, buf.name, "size", d)
            self._bind(stride, buf.name, "stride", d)
        self.values[node.name] = ViewRef(buf.name, buf.layout, buf.dtype)

    def _bind(self, size: Any, arg: str, kind: str, dim: int) -> None:
        """The first input a symbol is read from, bare (s0, not 2*s0), is where the host reads it."""
        if isinstance(size, sympy.Symbol) and size.name not in self.size_bindings:
            self.size_bindings[size.name] = (size.name, arg, kind, dim)

    def _constant(self, node: torch.fx.Node) -> None:
        tensor = getattr(self.gm, node.target)
        name = self.fresh_name(node.name)
        layout = Layout(tuple(tensor.shape), tuple(tensor.stride()), 0)
        self.constants[name] = tensor
        self.buffer_devices[name] = tensor.device.type
        if tensor.dim() == 0 and tensor.device.type == "cpu" and not tensor.is_complex():
            with _compat.real_tensors():  # lowering runs under the fake mode; a constant is a real tensor
                self.host_scalars[name] = tensor.item()
        self.inputs.append(Buffer(name, tensor.dtype, layout, tensor.device.type, kind="constant"))
        self.values[node.name] = ViewRef(name, layout, tensor.dtype)

    def _call(self, node: torch.fx.Node) -> None:
        prim = self.prims.node_prims[node.name]
        if prim == "getitem":
            source, i = node.args
            self.values[node.name] = self.values[source.name][i]
            return
        val = _compat.fake_value(node)
        if isinstance(val, torch.SymInt):  # arithmetic on sizes (sym_size, mul): its expression
            self.values[node.name] = as_size(val)
            return
        if isinstance(val, torch.SymFloat):
            self.values[node.name] = _size_float(node.name, val.node.expr)
            return
        self.source_fn = _source_fn(node)
        if isinstance(val, torch.Tensor):
            self._check_dtype(val.dtype, node)
        if self._copies_a_host_scalar(node, val):
            return
        handler = self.handlers.get(prim)
        if prim == "view":
            self.values[node.name] = self._view(node, val)
        elif prim == "extern" or handler is None:
            self._extern(node, self.prims.externs.get(node.name, f"no lowering for {prim}"))
        else:
            try:
                self.values[node.name] = handler(self, node, val)
            except Unsupported as why:
                self._extern(node, f"no lowering for {node.target} with these arguments: {why}")

    def _copies_a_host_scalar(self, node: torch.fx.Node, val: Any) -> bool:
        """A copy of a host scalar constant that stays on the host (`lift_fresh_copy`, `clone`, `_to_copy`
        to another dtype) is a host scalar constant too: made here, when compiling. Returned from the
        graph it must be a tensor of its own, so that case is left to the handlers."""
        if not (isinstance(val, torch.Tensor) and val.dim() == 0 and val.device.type != self.device):
            return False
        if node.target not in (torch.ops.aten.lift_fresh_copy.default, torch.ops.aten.clone.default,
                               torch.ops.aten._to_copy.default):
            return False
        source = node.args[0]
        view = self.values.get(source.name) if isinstance(source, torch.fx.Node) else None
        if not isinstance(view, ViewRef) or view.buffer not in self.host_scalars:
            return False
        if any(user.op != "call_function" for user in node.users):
            return False
        if view.dtype == val.dtype:
            self.values[node.name] = view
            return True
        with _compat.real_tensors():
            tensor = self.constants[view.buffer].to(val.dtype)
            value = tensor.item()
        name = self.fresh_name(node.name)
        self.constants[name] = tensor
        self.buffer_devices[name] = "cpu"
        self.host_scalars[name] = value
        layout = Layout((), (), 0)
        self.inputs.append(Buffer(name, tensor.dtype, layout, "cpu", kind="constant"))
        self.values[node.name] = ViewRef(name, layout, tensor.dtype)
        return True

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
            raise Unsupported(f"its result lives on {val.device.type}, not on the graph's device {self.device}")
        name = self.fresh_name(f"buf{len(self.nodes)}")
        self.buffer_devices[name] = val.device.type
        return Buffer(name, val.dtype, layout, val.device.type)

    def load(self, arg: Any, out_shape: tuple[int, ...], var_names: list[str], dtype: torch.dtype) -> Value:
        """Value of `arg` at the output point named by `var_names`, broadcast, cast to `dtype`."""
        if not isinstance(arg, torch.fx.Node):
            return Constant(scalar_of(arg, dtype), dtype)
        view = self.values[arg.name]
        if isinstance(view, (int, sympy.Expr)) and not isinstance(view, bool):  # a size: x * x.shape[0]
            return size_value(view, dtype)
        if isinstance(view, SizeRatio):
            return Op("truediv", (size_value(view.numerator, dtype), size_value(view.denominator, dtype)), dtype)
        if isinstance(view, float):  # a ratio of sizes that is a number for every size
            return Constant(scalar_of(view, dtype), dtype)
        if not isinstance(view, ViewRef):
            raise Unsupported(f"argument {arg.name} is not a tensor")
        if view.buffer in self.host_scalars and self.buffer_devices[view.buffer] != self.device:
            return Constant(scalar_of(self.host_scalars[view.buffer], dtype), dtype)
        if self.buffer_devices.get(view.buffer, self.device) != self.device:
            raise Unsupported(f"argument {arg.name} lives on {self.buffer_devices[view.buffer]}, "
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
        theirs = tuple(as_size(s) for s in base_val.stride())
        if not equal_sizes(tuple(base.layout.stride), theirs) and _more_than_one(base.layout.numel):
            # Our buffer is laid out differently from torch's metadata (new_buffer makes a strided
            # result such as copy(slice, src) contiguous): apply the view op itself to our layout.
            if node.target is torch.ops.aten.expand.default:
                return self._expanded(node, base)
            if base.layout.symbolic or any(isinstance(a, torch.fx.Node) for a in node.args[1:]):
                return self._restrided(node, base, val)
            val, base_val = self._view_of_our_layout(node, base, base_val), None

        def one(v: torch.Tensor) -> ViewRef:
            start = base_val.storage_offset() if base_val is not None else 0
            offset = base.layout.offset + v.storage_offset() - start
            return ViewRef(base.buffer, Layout(tuple(v.shape), tuple(v.stride()), offset), v.dtype)

        # split / unbind / chunk return several views of one buffer
        return tuple(one(v) for v in val) if isinstance(val, (list, tuple)) else one(val)

    def _expanded(self, node: torch.fx.Node, base: ViewRef) -> ViewRef:
        """expand() of our layout: new leading dims and expanded size-1 dims read with stride 0 (sizes
        may be symbolic, which the meta-tensor route of _view_of_our_layout cannot take)."""
        sizes = [as_size(self.values[a.name]) if isinstance(a, torch.fx.Node) else as_size(a) for a in node.args[1]]
        old = base.layout
        lead = len(sizes) - len(old.size)
        size, stride = list(sizes[:lead]), [0] * lead
        for want, have, st in zip(sizes[lead:], old.size, old.stride):
            if want == -1 or want == have:
                size.append(have)
                stride.append(st)
            elif have == 1:
                size.append(want)
                stride.append(0)
            else:
                raise LoweringError(f"view {node.name}: cannot expand size {have} to {want}")
        return ViewRef(base.buffer, Layout(tuple(size), tuple(stride), old.offset), base.dtype)

    def _restrided(self, node: torch.fx.Node, base: ViewRef, val: Any) -> ViewRef:
        """A view of our layout with symbolic sizes, by index arithmetic (views.py)."""
        if not isinstance(val, torch.Tensor):
            raise LoweringError(f"view {node.name} of {node.args[0].name}: several views of a symbolic "
                                "layout of ours")
        args = tuple(as_size(self.values[a.name]) if isinstance(a, torch.fx.Node) else a
                     for a in node.args[1:])
        try:
            layout = restride(node.target, base.layout, args, tuple(as_size(s) for s in val.shape))
        except NotAViewOfOurs as exc:
            raise LoweringError(f"view {node.name} of {node.args[0].name}: {exc}") from exc
        return ViewRef(base.buffer, layout, val.dtype)

    def _view_of_our_layout(self, node: torch.fx.Node, base: ViewRef, base_val: torch.Tensor) -> Any:
        """The view `node` computed on a meta tensor with our buffer's sizes and strides (storage offset
        0: the caller adds the buffer's). Views given explicit strides are refused: their strides
        name torch's layout, not ours."""
        if node.target in STRIDED_VIEWS or any(isinstance(a, torch.fx.Node) for a in node.args[1:]):
            raise LoweringError(f"view {node.name} of {node.args[0].name}: buffer layout differs from torch's "
                                "metadata")
        ours = torch.empty_strided(tuple(base_val.shape), tuple(base.layout.stride), dtype=base_val.dtype,
                                   device="meta")
        try:
            return node.target(ours, *node.args[1:], **node.kwargs)
        except RuntimeError as exc:  # e.g. a view() that our strides cannot express
            raise LoweringError(f"view {node.name} of {node.args[0].name}: not a view of our layout ({exc})") from exc

    def _extern(self, node: torch.fx.Node, reason: str) -> None:
        def convert(a: Any) -> Any:
            if isinstance(a, torch.fx.Node):
                v = self.values[a.name]
                # A size (sympy.Expr) goes in as the expression the host program computes at each
                # call: cuDNN attention's backward takes the forward's max_q/max_k, saved as sizes.
                if not isinstance(v, (ViewRef, int, float, bool, sympy.Expr)) and v is not None:
                    raise LoweringError(f"extern {node.name}: argument {a.name} is neither a tensor nor a size")
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
        # Besides tensors an op may return None (convolution_backward's output_mask) or a size (cuDNN
        # attention's max_q/max_k): later uses get the number itself, or with symbolic sizes its
        # expression, which the host program computes from the inputs like every other size.
        outs = [as_size(v) if isinstance(v, torch.SymInt) else v for v in outs]
        if any(v is not None and not isinstance(v, (torch.Tensor, int, float, bool, sympy.Expr)) for v in outs):
            raise LoweringError(f"extern {node.name} returns a symbolic value that is not a size ({outs})")
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


def _sole_updates(gm: torch.fx.GraphModule, updates: tuple[tuple[str, int], ...]) -> dict[str, str]:
    """node name -> input name, for each update pair (input name, output k) whose output k is a node
    that takes the input as its first argument, the input having no other reader: after such a node
    runs nothing needs the input's old value, so its result may be made in the input's storage."""
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    outputs = _flatten(next(iter(gm.graph.find_nodes(op="output"))).args[0])
    sole = {}
    for name, k in updates:
        if name not in placeholders or k >= len(outputs) or not isinstance(outputs[k], torch.fx.Node):
            continue
        node, placeholder = outputs[k], placeholders[name]
        if (node.op == "call_function" and node.args and node.args[0] is placeholder and len(placeholder.users) == 1
                and outputs.count(node) == 1):
            sole[node.name] = placeholder.name
    return sole


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


def _more_than_one(numel: Any) -> bool:
    """Whether a view's base has more than one element, where its strides matter. Redoing the view on
    our layout is right for any count, keeping torch's only for one element or none: so over symbolic
    sizes only a "no" is kept as a guard."""
    return known(numel > 1) or hint(numel) > 1 or decide(numel > 1)


class Unsupported(Exception):
    """This op's arguments are outside what the lowering handles: make it an extern call."""


def _flatten(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def scalar_of(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise Unsupported("symbolic scalar")
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


def _size_float(name: str, expr: sympy.Expr) -> Any:
    """A SymFloat's value: a size made a float (a mean's count) stays the integer size, cast where a
    kernel reads it (size_value); any other rational function of sizes (`n / (n - 1)`, batch norm's
    unbiased correction) is a SizeRatio of two integer expressions, or a float where it is a number."""
    kind = type(expr).__name__
    if kind == "ToFloat" and isinstance(expr.args[0], sympy.Expr):
        return as_size(expr.args[0])
    ratio = _rational_of_sizes(expr)
    if ratio is None:
        raise LoweringError(f"{name} is a symbolic float ({expr}), not a rational function of sizes")
    numerator, denominator = sympy.fraction(sympy.cancel(sympy.together(ratio)))
    if numerator.is_number and denominator.is_number:
        return float(numerator / denominator)
    if denominator == 1:
        return as_size(numerator)
    return SizeRatio(as_size(numerator), as_size(denominator))


def _rational_of_sizes(expr: sympy.Expr) -> Optional[sympy.Expr]:
    """`expr` (torch's float arithmetic over sizes: ToFloat, IntTrueDiv, FloatTrueDiv, sums, products,
    whole powers, float literals) as a sympy quotient of integer expressions, exact; None where it is
    something else (a float that is no short binary fraction, a square root)."""
    kind = type(expr).__name__
    if isinstance(expr, sympy.Float):
        exact = sympy.Rational(float(expr))
        return exact if exact.q <= 1 << 20 else None
    if expr.is_Integer or (expr.is_integer and kind not in ("ToFloat", "IntTrueDiv", "FloatTrueDiv")):
        return expr  # a size, or torch's integer functions of sizes (FloorDiv, Mod)
    if kind == "ToFloat":
        return _rational_of_sizes(expr.args[0])
    if kind in ("IntTrueDiv", "FloatTrueDiv"):
        parts = [_rational_of_sizes(a) for a in expr.args]
        return None if None in parts else parts[0] / parts[1]
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [_rational_of_sizes(a) for a in expr.args]
        return None if None in parts else expr.func(*parts)
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer:
        base = _rational_of_sizes(expr.base)
        return None if base is None else base ** expr.exp
    return None


def size_value(size: Any, dtype: torch.dtype) -> Value:
    """A size as a kernel value: a literal, or (symbolic) an index expression the kernel computes from
    its size arguments."""
    size = as_size(size)
    if not isinstance(size, sympy.Expr):
        return Constant(scalar_of(size, dtype), dtype)
    value: Value = IndexValue(Index.of(size), torch.int64)
    return value if dtype == torch.int64 else Cast(value, dtype)


def broadcast_index(layout: Layout, out_shape: tuple[int, ...], var_names: list[str]) -> Index:
    """Flat offset of the element of a (broadcast) view that lines up with an output point."""
    index = Index.of(layout.offset)
    lead = len(out_shape) - len(layout.size)
    for d, (size, stride) in enumerate(zip(layout.size, layout.stride)):
        name = var_names[lead + d]
        if size != 1 and name:
            index = index + Index.var(name) * stride
    return index
