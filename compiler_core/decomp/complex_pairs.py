"""Complex values as real numbers: the rewrite that lets our kernels run graphs with complex tensors.

Our code generators know real, integer and bool dtypes. A graph with complex tensors in it (Meta's
rotary embedding: `view_as_complex`, a product with a complex `freqs_cis` buffer, `view_as_real`) is
rewritten here, before the primitives, into a graph over reals. Each complex value is held as

- its **parts**: two real tensors of the complex shape, the real and the imaginary part. Arithmetic
  reads and writes these (a complex product is four multiplies and two adds), and they fuse like any
  other pointwise op;
- or its **pair**: one real tensor with a trailing dimension of 2, torch's `view_as_real` layout. The
  graph's complex inputs and outputs are pairs, `view_as_complex(x)` is the pair `x`, and views of a
  pair stay views (an output that aliases an input keeps aliasing it).

Each form is made from the other only when a reader needs it: parts of a pair are two `select` views
(no copy), a pair of parts is one concatenation.

The caller still passes and receives complex tensors: `reinterpreting` wraps the compiled program,
viewing each complex input as its pair (`view_as_real`, no copy) and each pair it returns as complex
(`view_as_complex`, no copy).

An ATen op on complex values with no rule here (an FFT, an eigendecomposition) stays PyTorch's call,
taking and returning pairs (complex_calls.py); the session lists it as an extern call. Anything else
(a complex constant, complex32) raises `NotRealPairs` naming it, and the graph runs in eager PyTorch
with that reason in the session.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch
from torch.fx import Graph, GraphModule, Node
from torch.fx.node import map_aggregate

from compiler_core import _compat
from compiler_core.decomp import complex_calls
from compiler_core.decomp.artifacts import ComplexPairs
from compiler_core.decomp.fused_multiply_add import fused_multiply_add  # noqa: F401 - registers the op

aten = torch.ops.aten

REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}
# Node metadata the later stages and the explorer read (source lines, module paths, provenance).
_KEPT_META = ("stack_trace", "nn_module_stack", "source_fn_stack", "original_aten", "seq_nr", "from_node")


class NotRealPairs(Exception):
    """A complex op this rewrite has no rule for (the graph then runs in eager PyTorch)."""


def has_complex(gm: GraphModule) -> bool:
    """Whether any value in the graph is a complex tensor."""
    return any(_is_complex(n.meta.get("val")) for n in gm.graph.nodes)


def as_real_pairs(gm: GraphModule) -> tuple[GraphModule, ComplexPairs]:
    """A new graph computing the same values with real tensors only (the input graph is not changed).

    >>> real_gm, pairs = as_real_pairs(rope_gm)   # view_as_complex(x) * freqs_cis -> real multiplies
    >>> call = reinterpreting(compiled(real_gm), pairs)
    """
    rewrite = _Rewrite(gm)
    graph = rewrite.run()
    pairs = ComplexPairs(tuple(rewrite.complex_inputs), tuple(rewrite.complex_outputs), tuple(rewrite.rewritten))
    return GraphModule(gm, graph), pairs


def reinterpreting(call: Callable[[list], Any], pairs: ComplexPairs) -> Callable[[list], Any]:
    """Wrap a boxed program compiled from `as_real_pairs`' graph so that it takes and returns complex
    tensors where the original graph did."""
    inputs, outputs = pairs.complex_inputs, frozenset(pairs.complex_outputs)

    def run(args: list) -> Any:
        for i in inputs:
            value = args[i]
            if isinstance(value, torch.Tensor) and value.is_complex():
                # A lazily conjugated (or negated) tensor has no pair view: its bits are made real first.
                args[i] = torch.view_as_real(value.resolve_conj().resolve_neg())
        results = call(args)
        converted = [complex_calls.as_complex(r) if i in outputs else r for i, r in enumerate(results)]
        return converted if isinstance(results, list) else tuple(converted)

    return _compat.boxed(run)


def _is_complex(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_is_complex(v) for v in value)
    return isinstance(value, torch.Tensor) and value.is_complex()


@dataclass
class _Complex:
    """One complex value of the new graph: its pair, its parts, or both (each made when first read).
    An imaginary part of None is zero (a real value made complex)."""

    name: str
    dtype: torch.dtype  # the real dtype of the parts
    pair: Optional[Node] = None
    parts: Optional[tuple[Node, Optional[Node]]] = None


Operand = Union[Node, _Complex, int, float, complex, bool, None]


class _Rewrite:
    def __init__(self, gm: GraphModule):
        self.gm = gm
        self.graph = Graph()
        self.env: dict[Node, Any] = {}
        self.fake_mode = _compat.fake_mode_of(gm)
        if self.fake_mode is None:
            raise NotRealPairs("the graph carries no fake values")
        self.complex_inputs: list[int] = []
        self.complex_outputs: list[int] = []
        self.rewritten: list[str] = []
        self.current: Optional[Node] = None  # the original node being rewritten (names and metadata)
        self.copied: dict[Node, Node] = {}  # nodes copied unchanged (their layout is the traced one)

    # -- building nodes -----------------------------------------------------------------------------

    def emit(self, target: Any, *args: Any, suffix: str = "", **kwargs: Any) -> Node:
        """A call_function node in the new graph, with its fake value computed as it is made."""
        name = f"{self.current.name}{suffix}" if self.current is not None else None
        node = self.graph.create_node("call_function", target, args, kwargs, name=name)
        values = map_aggregate((args, kwargs), lambda a: a.meta["val"] if isinstance(a, Node) else a)
        with self.fake_mode:
            node.meta["val"] = target(*values[0], **values[1])
        if self.current is not None:
            node.meta.update({k: self.current.meta[k] for k in _KEPT_META if k in self.current.meta})
        return node

    def parts(self, value: _Complex) -> tuple[Node, Node]:
        """Real and imaginary parts, both as tensors (a zero imaginary part made where it was None)."""
        if value.parts is None:
            value.parts = (self.emit(aten.select.int, value.pair, -1, 0, suffix="_re"),
                           self.emit(aten.select.int, value.pair, -1, 1, suffix="_im"))
        re, im = value.parts
        if im is None:
            im = self.emit(aten.full_like.default, re, 0, suffix="_im")
            value.parts = (re, im)
        return re, im

    def lazy_parts(self, operand: Operand) -> tuple[Any, Any]:
        """(real, imaginary) of any operand, imaginary None for a real one: tensors, Python numbers."""
        if isinstance(operand, _Complex):
            if operand.parts is not None and operand.parts[1] is None:
                return operand.parts
            return self.parts(operand)
        if isinstance(operand, complex):
            return operand.real, operand.imag
        return operand, None

    def pair(self, value: _Complex) -> Node:
        if value.pair is None:
            re, im = self.parts(value)
            value.pair = self.emit(aten.cat.default, [self.emit(aten.unsqueeze.default, re, -1, suffix="_re"),
                                                      self.emit(aten.unsqueeze.default, im, -1, suffix="_im")],
                                   -1, suffix="_pair")
        return value.pair

    def complex_of(self, node: Node, re: Any, im: Any) -> _Complex:
        """The node's complex value from two parts, cast and broadcast to the node's dtype and shape."""
        val = node.meta["val"]
        dtype = REAL_OF.get(val.dtype)
        if dtype is None:
            raise NotRealPairs(f"{node.target} makes a {val.dtype} value (only complex64 and complex128 are "
                               "rewritten into real pairs)")
        return _Complex(node.name, dtype, parts=(self.conform(re, val, dtype), self.conform(im, val, dtype)))

    def conform(self, part: Any, val: torch.Tensor, dtype: torch.dtype) -> Any:
        """A part as a tensor of `val`'s shape in `dtype` (numbers and broadcast operands are widened)."""
        if part is None:
            return None
        if not isinstance(part, Node):  # a number: a tensor of the value's shape filled with it
            shape = list(val.shape)
            if not all(isinstance(s, int) for s in shape):
                raise NotRealPairs("a complex value made from a number alone, with symbolic sizes")
            return self.emit(aten.full.default, shape, part, dtype=dtype, device=val.device, suffix="_part")
        meta = part.meta["val"]
        if meta.dtype != dtype:
            part = self.emit(aten._to_copy.default, part, dtype=dtype, suffix="_cast")
        if tuple(meta.shape) != tuple(val.shape):
            if not all(isinstance(s, int) for s in val.shape):
                raise NotRealPairs("a complex value broadcast from a smaller operand, with symbolic sizes")
            part = self.emit(aten.expand.default, part, list(val.shape), suffix="_expand")
        return part

    def tensor_like(self, part: Any, like: Node) -> Node:
        """A part as a tensor: a number (or None, zero) becomes a tensor of `like`'s shape filled with it."""
        if isinstance(part, Node):
            return part
        return self.emit(aten.full_like.default, like, 0 if part is None else part, suffix="_part")

    def real_result(self, node: Node, result: Node) -> Node:
        """A real node's value in the dtype it was traced with."""
        want = node.meta["val"].dtype
        if result.meta["val"].dtype != want:
            result = self.emit(aten._to_copy.default, result, dtype=want, suffix="_cast")
        return result

    # -- arithmetic on parts (None = 0) -------------------------------------------------------------

    def add(self, a: Any, b: Any) -> Any:
        if a is None:
            return b
        if b is None:
            return a
        if not isinstance(a, Node) and not isinstance(b, Node):
            return a + b
        return self.emit(aten.add.Tensor, a, b) if isinstance(a, Node) else self.emit(aten.add.Tensor, b, a)

    def sub(self, a: Any, b: Any) -> Any:
        if b is None:
            return a
        if a is None:
            return self.neg(b)
        if not isinstance(a, Node) and not isinstance(b, Node):
            return a - b
        if isinstance(a, Node):
            return self.emit(aten.sub.Tensor, a, b)
        # a number minus a tensor as (-b) + a, the same bits (negation is exact): the rewrite runs after
        # decomposition, which would have turned an rsub into these ops; an rsub left here ran in eager.
        return self.emit(aten.add.Tensor, self.neg(b), a)

    def mul(self, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return None
        if not isinstance(a, Node) and not isinstance(b, Node):
            return a * b
        return self.emit(aten.mul.Tensor, a, b) if isinstance(a, Node) else self.emit(aten.mul.Tensor, b, a)

    def neg(self, a: Any) -> Any:
        if a is None:
            return None
        return self.emit(aten.neg.default, a) if isinstance(a, Node) else -a

    def div(self, a: Any, b: Any) -> Any:
        if a is None:
            return None
        if not isinstance(a, Node) and not isinstance(b, Node):
            return a / b
        return self.emit(aten.div.Tensor, a, b) if isinstance(a, Node) else \
            self.emit(aten.mul.Tensor, self.emit(aten.reciprocal.default, b), a)

    # -- the walk -----------------------------------------------------------------------------------

    def run(self) -> Graph:
        for index, node in enumerate(n for n in self.gm.graph.nodes if n.op == "placeholder"):
            self.placeholder(node, index)
        for node in self.gm.graph.nodes:
            self.current = node
            if node.op == "placeholder":
                continue
            if node.op == "output":
                self.output(node)
            elif node.op == "get_attr":
                if _is_complex(node.meta.get("val")):
                    raise NotRealPairs(f"complex constant {node.target}")
                self.env[node] = self.graph.node_copy(node, lambda n: self.env[n])
            elif node.op == "call_function":
                self.env[node] = self.call(node)
            else:
                raise NotRealPairs(f"{node.op} node {node.name}")
        self.current = None
        return self.graph

    def placeholder(self, node: Node, index: int) -> None:
        new = self.graph.placeholder(node.name)
        new.meta.update(node.meta)
        val = node.meta.get("val")
        if not _is_complex(val):
            self.env[node] = new
            return
        if val.dtype not in REAL_OF:
            raise NotRealPairs(f"input {node.name} is {val.dtype} (only complex64 and complex128 are rewritten)")
        with self.fake_mode:  # as `reinterpreting` will pass it
            new.meta["val"] = torch.view_as_real(val.resolve_conj().resolve_neg())
        self.complex_inputs.append(index)
        self.env[node] = _Complex(node.name, REAL_OF[val.dtype], pair=new)

    def output(self, node: Node) -> None:
        flat: list[Any] = []

        def convert(arg: Any) -> Any:
            value = self.env[arg] if isinstance(arg, Node) else arg
            if isinstance(value, _Complex):
                self.complex_outputs.append(len(flat))
                value = self.pair(value)
            traced = arg.meta.get("val") if isinstance(arg, Node) else None
            if isinstance(value, Node) and isinstance(traced, torch.Tensor) and value is not self.copied.get(arg):
                value = self.in_traced_layout(value, traced)
            flat.append(value)
            return value

        self.current = None
        outputs = map_aggregate(node.args[0], convert)
        self.graph.output(outputs)

    def in_traced_layout(self, value: Node, traced: torch.Tensor) -> Node:
        """An output laid out as traced (a complex one as `view_as_real` of its traced value). Whoever
        reads an output assumes its traced strides: a training forward's saved tensors are read by a
        backward graph compiled for them (an FFT's output is not row-major; a concatenation of parts
        is). Autoformer's query and key gradients were off by 3.7x their size without this."""
        with self.fake_mode:
            expected = torch.view_as_real(traced.resolve_conj().resolve_neg()) if traced.is_complex() else traced
        got = value.meta["val"]
        if tuple(got.stride()) == tuple(expected.stride()) or not _compat.is_non_overlapping_and_dense(expected):
            return value
        laid_out = self.emit(aten.empty_strided.default, list(expected.shape), list(expected.stride()),
                             dtype=expected.dtype, device=expected.device)
        return self.emit(aten.copy.default, laid_out, value)

    def call(self, node: Node) -> Any:
        args = map_aggregate(node.args, lambda a: self.env[a] if isinstance(a, Node) else a)
        kwargs = map_aggregate(node.kwargs, lambda a: self.env[a] if isinstance(a, Node) else a)
        if node.target is operator.getitem and isinstance(args[0], (list, tuple)):
            return args[0][args[1]]
        touched = _is_complex(node.meta.get("val")) or any(
            isinstance(a, _Complex) or isinstance(a, complex) for a in _flat((args, kwargs)))
        if not touched:
            self.copied[node] = self.graph.node_copy(node, lambda n: self.env[n])
            return self.copied[node]
        rule = RULES.get(node.target) or RULES.get(getattr(node.target, "overloadpacket", None))
        if rule is not None:
            result = rule(self, node, *args, **kwargs)
            self.rewritten.append(f"{node.name}: {node.target}")
            return result
        if isinstance(node.target, torch._ops.OpOverload):
            self.rewritten.append(f"{node.name}: {node.target} (PyTorch's, on real pairs)")
            return self.pytorch_call(node, args, kwargs)
        raise NotRealPairs(f"{node.target} on complex values has no rewrite into real ops")

    def pytorch_call(self, node: Node, args: tuple, kwargs: dict) -> Any:
        """The op as PyTorch's own call (complex_calls.py), its complex operands and results as pairs."""
        tensors: list[Node] = []
        pairs: set[int] = set()

        def slot(value: Any) -> Any:
            if isinstance(value, _Complex):
                pairs.add(len(tensors))
                value = self.pair(value)
            if isinstance(value, Node):
                tensors.append(value)
                return complex_calls.Slot(len(tensors) - 1)
            return value

        template_args = map_aggregate(args, slot)
        template_kwargs = tuple(sorted((k, map_aggregate(v, slot)) for k, v in kwargs.items()))
        call = complex_calls.ComplexCall(node.target, _plain(template_args), _plain(template_kwargs),
                                         frozenset(pairs))
        results = self.emit(complex_calls.custom_op_for(call), call.key, tensors, suffix="_pytorch")
        val = node.meta["val"]
        outs = list(val) if isinstance(val, (list, tuple)) else [val]
        values = []
        for i, out in enumerate(outs):
            item = self.emit(operator.getitem, results, i, suffix=f"_{i}")
            values.append(_Complex(node.name, REAL_OF[out.dtype], pair=item) if _is_complex(out) else item)
        return values if isinstance(val, (list, tuple)) else values[0]


def _plain(tree: Any) -> Any:
    """map_aggregate's immutable lists as tuples: a call's template is hashable and prints plainly."""
    if isinstance(tree, (list, tuple)):
        return tuple(_plain(t) for t in tree)
    return tree


def _flat(tree: Any) -> list:
    out: list = []
    map_aggregate(tree, lambda a: out.append(a) or a)
    return out


# -- rules: (rewrite, original node, *mapped args, **mapped kwargs) -> new value -----------------------

RULES: dict[Any, Callable[..., Any]] = {}


def _rule(*targets: Any) -> Callable:
    def register(fn: Callable) -> Callable:
        for t in targets:
            RULES[t] = fn
        return fn
    return register


def _pair_view_args(target: Any, node: Node, args: tuple, kwargs: dict) -> Optional[tuple[tuple, dict]]:
    """The arguments that apply a view of a complex tensor to its pair (one more, trailing, dimension
    of 2), or None where the view has no pair form here (then it applies to both parts)."""
    n = node.args[0].meta["val"].dim()
    packet = getattr(target, "overloadpacket", None)
    rest = args[1:]
    if packet in (aten.view, aten._unsafe_view, aten.reshape, aten.expand):
        return (list(rest[0]) + [2], *rest[1:]), kwargs
    if n == 0:
        return ((), kwargs) if packet in (aten.alias, aten.clone) else None
    if packet is aten.permute:
        return ([d % n for d in rest[0]] + [n],), kwargs
    if packet is aten.unsqueeze:
        return (rest[0] % (n + 1),), kwargs
    if target is aten.squeeze.dim:
        return (rest[0] % n,), kwargs
    if target is aten.squeeze.dims:
        return ([d % n for d in rest[0]],), kwargs
    if packet in (aten.slice, aten.select) and target in (aten.slice.Tensor, aten.select.int):
        dim = rest[0] if rest else kwargs.get("dim", 0)
        tail = rest[1:] if rest else ()
        return (dim % n, *tail), {k: v for k, v in kwargs.items() if k != "dim"}
    if target is aten.transpose.int:
        return (rest[0] % n, rest[1] % n), kwargs
    if packet in (aten.alias, aten.clone) and kwargs.get("memory_format") in (None, torch.contiguous_format,
                                                                             torch.preserve_format):
        return (), kwargs
    return None


@_rule(aten.view, aten._unsafe_view, aten.reshape, aten.expand, aten.permute, aten.unsqueeze, aten.squeeze,
       aten.slice, aten.select, aten.transpose, aten.t, aten.alias, aten.clone, aten.narrow, aten.diagonal,
       aten.unfold, aten.flip, aten.roll, aten.repeat, aten.index_select, aten.gather, aten.index,
       aten._unsafe_index)
def _same_on_both(rw: _Rewrite, node: Node, value: Any, *args: Any, **kwargs: Any) -> _Complex:
    """Ops that move complex elements without combining them: a view of the pair where one applies,
    else the same op on each part."""
    if not isinstance(value, _Complex) or any(isinstance(a, _Complex) for a in _flat((args, kwargs))):
        raise NotRealPairs(f"{node.target} with a complex operand other than its first")
    target = node.target
    if target is aten.t.default:
        target, args = aten.transpose.int, (0, 1) if node.args[0].meta["val"].dim() == 2 else None
        if args is None:
            target, args = aten.alias.default, ()
    if target is aten.squeeze.default:
        val = node.args[0].meta["val"]
        target, args = aten.squeeze.dims, ([d for d in range(val.dim()) if val.shape[d] == 1],)
    if value.pair is not None and value.parts is None:
        mapped = _pair_view_args(target, node, (value, *args), kwargs)
        if mapped is not None:
            return _Complex(node.name, value.dtype, pair=rw.emit(target, value.pair, *mapped[0], **mapped[1]))
    re, im = rw.lazy_parts(value)
    return _Complex(node.name, value.dtype, parts=(rw.emit(target, re, *args, suffix="_re", **kwargs),
                                                   None if im is None else
                                                   rw.emit(target, im, *args, suffix="_im", **kwargs)))


@_rule(aten.view_as_complex)
def _view_as_complex(rw: _Rewrite, node: Node, pair: Node) -> _Complex:
    return _Complex(node.name, node.args[0].meta["val"].dtype, pair=pair)


@_rule(aten.view_as_real)
def _view_as_real(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    return rw.pair(value)


@_rule(aten.real)
def _real(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    return rw.lazy_parts(value)[0]


@_rule(aten.imag)
def _imag(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    return rw.parts(value)[1]


@_rule(aten.complex)
def _complex(rw: _Rewrite, node: Node, re: Node, im: Node) -> _Complex:
    return rw.complex_of(node, re, im)


@_rule(aten.polar)
def _polar(rw: _Rewrite, node: Node, magnitude: Node, angle: Node) -> _Complex:
    return rw.complex_of(node, rw.mul(magnitude, rw.emit(aten.cos.default, angle, suffix="_cos")),
                         rw.mul(magnitude, rw.emit(aten.sin.default, angle, suffix="_sin")))


@_rule(aten.add, aten.sub)
def _add_sub(rw: _Rewrite, node: Node, a: Operand, b: Operand, alpha: Any = 1) -> _Complex:
    (ar, ai), (br, bi) = rw.lazy_parts(a), rw.lazy_parts(b)
    if alpha != 1:
        if isinstance(alpha, complex):
            br, bi = rw.sub(rw.mul(br, alpha.real), rw.mul(bi, alpha.imag)), \
                rw.add(rw.mul(br, alpha.imag), rw.mul(bi, alpha.real))
        else:
            br, bi = rw.mul(br, alpha), rw.mul(bi, alpha)
    combine = rw.add if node.target.overloadpacket is aten.add else rw.sub
    return rw.complex_of(node, combine(ar, br), combine(ai, bi))


@_rule(aten.rsub)
def _rsub(rw: _Rewrite, node: Node, a: Operand, b: Operand, alpha: Any = 1) -> _Complex:
    (ar, ai), (br, bi) = rw.lazy_parts(a), rw.lazy_parts(b)
    if alpha != 1:
        if isinstance(alpha, complex):
            raise NotRealPairs("rsub with a complex alpha")
        ar, ai = rw.mul(ar, alpha), rw.mul(ai, alpha)
    return rw.complex_of(node, rw.sub(br, ar), rw.sub(bi, ai))


@_rule(aten.mul)
def _mul(rw: _Rewrite, node: Node, a: Operand, b: Operand) -> _Complex:
    (ar, ai), (br, bi) = rw.lazy_parts(a), rw.lazy_parts(b)
    # (ar + i ai)(br + i bi) = (ar br - ai bi) + i (ar bi + ai br)
    parts = (ar, ai, br, bi)
    if node.meta["val"].device.type == "cuda" and all(isinstance(p, Node) for p in parts) and \
            ar.meta["val"].dtype in (torch.float32, torch.float64):
        # Eager's CUDA kernel is compiled with contraction: each part is one FMA over the other
        # product, rounded once (decomp/fused_multiply_add.py), and so is ours, bit for bit.
        fma = torch.ops.fcompile.fused_multiply_add.default
        return rw.complex_of(node, rw.emit(fma, ar, br, rw.neg(rw.mul(ai, bi))),
                             rw.emit(fma, ar, bi, rw.mul(ai, br)))
    return rw.complex_of(node, rw.sub(rw.mul(ar, br), rw.mul(ai, bi)), rw.add(rw.mul(ar, bi), rw.mul(ai, br)))


@_rule(aten.div, torch.ops.prims.div)
def _div(rw: _Rewrite, node: Node, a: Operand, b: Operand, rounding_mode: Optional[str] = None) -> _Complex:
    if rounding_mode is not None:
        raise NotRealPairs("complex division with a rounding mode")
    (ar, ai), (br, bi) = rw.lazy_parts(a), rw.lazy_parts(b)
    if bi is None:  # by a real divisor: each part
        return rw.complex_of(node, rw.div(ar, br), rw.div(ai, br))
    if not isinstance(br, Node):  # by a complex number: times its reciprocal, computed here
        inverse = 1 / complex(br, bi)
        br, bi = inverse.real, inverse.imag
        return rw.complex_of(node, rw.sub(rw.mul(ar, br), rw.mul(ai, bi)), rw.add(rw.mul(ar, bi), rw.mul(ai, br)))
    # Smith's algorithm, as c10::complex divides: scaled by the larger of |br|, |bi| so that no square
    # of the divisor overflows or underflows, then times the reciprocal of the scaled denominator; a
    # zero divisor gives each part divided by zero. A real dividend is complex with an imaginary part
    # of +0, as eager promotes it: 1 / (2 + 0i) is 0.5 + 0i there (dropping its terms gave -0i).
    ai = 0.0 if ai is None else ai
    abs_r, abs_i = rw.emit(aten.abs.default, br), rw.emit(aten.abs.default, bi)
    real_larger = rw.emit(aten.ge.Tensor, abs_r, abs_i)
    ratio = rw.emit(aten.where.self, real_larger, rw.div(bi, br), rw.div(br, bi))
    scale = rw.emit(aten.reciprocal.default, rw.emit(aten.where.self, real_larger, rw.add(br, rw.mul(bi, ratio)),
                                                     rw.add(bi, rw.mul(br, ratio))))
    re = rw.emit(aten.where.self, real_larger, rw.mul(rw.add(ar, rw.mul(ai, ratio)), scale),
                 rw.mul(rw.add(rw.mul(ar, ratio), ai), scale))
    im = rw.emit(aten.where.self, real_larger, rw.mul(rw.sub(ai, rw.mul(ar, ratio)), scale),
                 rw.mul(rw.sub(rw.mul(ai, ratio), ar), scale))
    by_zero = rw.emit(aten.logical_and.default, rw.emit(aten.eq.Scalar, abs_r, 0), rw.emit(aten.eq.Scalar, abs_i, 0))
    return rw.complex_of(node, rw.emit(aten.where.self, by_zero, rw.div(rw.tensor_like(ar, abs_r), abs_r), re),
                         rw.emit(aten.where.self, by_zero, rw.div(rw.tensor_like(ai, abs_i), abs_i), im))


@_rule(aten.neg)
def _neg(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    re, im = rw.lazy_parts(value)
    return rw.complex_of(node, rw.neg(re), rw.neg(im))


@_rule(aten._conj, aten.conj, aten.conj_physical, aten._conj_physical)
def _conj(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    # `_conj` is a lazy view in eager; here its values are made (nobody writes through it: the graph
    # is functional).
    re, im = rw.lazy_parts(value)
    return rw.complex_of(node, re, rw.neg(im))


@_rule(aten.resolve_conj, aten.resolve_neg, aten.lift_fresh_copy)
def _identity(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    return value


@_rule(aten._neg_view)
def _neg_view(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    return _neg(rw, node, value)


@_rule(aten.abs)
def _abs(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    re, im = rw.parts(value)
    return rw.real_result(node, rw.emit(aten.hypot.default, re, im))


@_rule(aten.angle)
def _angle(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    re, im = rw.parts(value)
    return rw.real_result(node, rw.emit(aten.atan2.default, im, re))


@_rule(aten.isinf)
def _isinf(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    re, im = rw.parts(value)
    return rw.emit(aten.logical_or.default, rw.emit(aten.isinf.default, re), rw.emit(aten.isinf.default, im))


def _nonzero(rw: _Rewrite, operand: Operand) -> Any:
    re, im = rw.lazy_parts(operand)
    if not isinstance(re, Node):
        raise NotRealPairs("a logical op on a complex number alone")
    nonzero = rw.emit(aten.ne.Scalar, re, 0)
    return nonzero if im is None else rw.emit(aten.logical_or.default, nonzero, rw.emit(aten.ne.Scalar, im, 0))


@_rule(aten.logical_and, aten.logical_or, aten.logical_xor)
def _logical(rw: _Rewrite, node: Node, a: Operand, b: Operand) -> Node:
    op = {aten.logical_and: aten.logical_and.default, aten.logical_or: aten.logical_or.default,
          aten.logical_xor: aten.logical_xor.default}[node.target.overloadpacket]
    return rw.emit(op, _nonzero(rw, a), _nonzero(rw, b))


@_rule(aten.sum, aten.mean)
def _sum(rw: _Rewrite, node: Node, value: _Complex, *args: Any, dtype: Optional[torch.dtype] = None,
         **kwargs: Any) -> _Complex:
    re, im = rw.lazy_parts(value)
    real_dtype = REAL_OF.get(dtype, dtype) if dtype is not None else None
    extra = {**kwargs, **({"dtype": real_dtype} if real_dtype is not None else {})}
    return rw.complex_of(node, rw.emit(node.target, re, *args, suffix="_re", **extra),
                         None if im is None else rw.emit(node.target, im, *args, suffix="_im", **extra))


@_rule(aten._to_copy)
def _to_copy(rw: _Rewrite, node: Node, value: Operand, **kwargs: Any) -> Any:
    if set(kwargs) - {"dtype", "layout", "device", "pin_memory", "memory_format"} or \
            kwargs.get("device") not in (None, node.args[0].meta["val"].device):
        raise NotRealPairs(f"_to_copy with {kwargs} on complex values")
    re, im = rw.lazy_parts(value)
    if not _is_complex(node.meta["val"]):  # complex -> real keeps the real part (eager warns)
        return rw.real_result(node, re)
    return rw.complex_of(node, re, im)


@_rule(aten.cat)
def _cat(rw: _Rewrite, node: Node, tensors: list, dim: int = 0) -> _Complex:
    parts = [rw.parts(t) if isinstance(t, _Complex) else (t, None) for t in tensors]
    ims = [im if im is not None else rw.emit(aten.full_like.default, re, 0, suffix="_im") for re, im in parts]
    return rw.complex_of(node, rw.emit(aten.cat.default, [re for re, _ in parts], dim, suffix="_re"),
                         rw.emit(aten.cat.default, ims, dim, suffix="_im"))


@_rule(aten.where, torch.ops.prims.where)
def _where(rw: _Rewrite, node: Node, cond: Node, a: Operand, b: Operand) -> _Complex:
    if node.target not in (aten.where.self, torch.ops.prims.where.default):
        raise NotRealPairs(f"{node.target} on complex values")
    (ar, ai), (br, bi) = rw.lazy_parts(a), rw.lazy_parts(b)
    like = next((p for p in (ar, br) if isinstance(p, Node)), None)
    if like is None:
        raise NotRealPairs("where() between two numbers")
    re = rw.emit(aten.where.self, cond, rw.tensor_like(ar, like), rw.tensor_like(br, like), suffix="_re")
    im = rw.emit(aten.where.self, cond, rw.tensor_like(ai, like), rw.tensor_like(bi, like), suffix="_im")
    return rw.complex_of(node, re, im)


@_rule(aten.constant_pad_nd)
def _constant_pad(rw: _Rewrite, node: Node, value: _Complex, pad: list, fill: Any = 0) -> _Complex:
    re, im = rw.parts(value)
    fill = complex(fill)
    return rw.complex_of(node, rw.emit(aten.constant_pad_nd.default, re, pad, fill.real, suffix="_re"),
                         rw.emit(aten.constant_pad_nd.default, im, pad, fill.imag, suffix="_im"))


@_rule(aten.copy)
def _copy(rw: _Rewrite, node: Node, destination: Operand, source: Operand, non_blocking: bool = False) -> Any:
    """The functional copy: `source` broadcast into `destination`'s shape and dtype."""
    (dr, di), (sr, si) = rw.lazy_parts(destination), rw.lazy_parts(source)
    re = rw.emit(aten.copy.default, dr, sr, suffix="_re")
    if not _is_complex(node.meta["val"]):  # into a real tensor: the real part (eager warns)
        return rw.real_result(node, re)
    di = di if di is not None else rw.emit(aten.full_like.default, dr, 0, suffix="_im")
    im = rw.emit(aten.copy.default, di, rw.tensor_like(si, di), suffix="_im")
    return rw.complex_of(node, re, im)


@_rule(aten.mm, aten.bmm)
def _matmul(rw: _Rewrite, node: Node, a: Operand, b: Operand) -> _Complex:
    (ar, ai), (br, bi) = rw.lazy_parts(a), rw.lazy_parts(b)
    product = node.target

    def mm(x: Any, y: Any) -> Any:
        return None if x is None or y is None else rw.emit(product, x, y)
    return rw.complex_of(node, rw.sub(mm(ar, br), mm(ai, bi)), rw.add(mm(ar, bi), mm(ai, br)))


@_rule(aten.full, aten.scalar_tensor)
def _full(rw: _Rewrite, node: Node, *args: Any, dtype: Optional[torch.dtype] = None, **kwargs: Any) -> _Complex:
    value = args[-1] if args else kwargs.pop("fill_value")
    value = complex(value)
    real_dtype = REAL_OF.get(node.meta["val"].dtype)
    head = args[:-1]
    return rw.complex_of(node, rw.emit(node.target, *head, value.real, dtype=real_dtype, suffix="_re", **kwargs),
                         rw.emit(node.target, *head, value.imag, dtype=real_dtype, suffix="_im", **kwargs))


@_rule(aten.full_like)
def _full_like(rw: _Rewrite, node: Node, like: Operand, value: Any, dtype: Optional[torch.dtype] = None,
               **kwargs: Any) -> _Complex:
    value = complex(value)
    base = rw.lazy_parts(like)[0]
    real_dtype = REAL_OF.get(node.meta["val"].dtype)
    return rw.complex_of(node, rw.emit(aten.full_like.default, base, value.real, dtype=real_dtype, suffix="_re",
                                       **kwargs),
                         rw.emit(aten.full_like.default, base, value.imag, dtype=real_dtype, suffix="_im",
                                 **kwargs))


@_rule(aten.split, aten.split_with_sizes, aten.unsafe_split, aten.unsafe_split_with_sizes, aten.unbind,
       aten.chunk, aten.unsafe_chunk)
def _split(rw: _Rewrite, node: Node, value: _Complex, *args: Any, **kwargs: Any) -> list[_Complex]:
    """Ops returning several pieces: the same op on each part, piece i made of both parts' piece i."""
    re, im = rw.parts(value)
    pieces_re = rw.emit(node.target, re, *args, suffix="_re", **kwargs)
    pieces_im = rw.emit(node.target, im, *args, suffix="_im", **kwargs)
    return [_Complex(f"{node.name}_{i}", value.dtype,
                     parts=(rw.emit(operator.getitem, pieces_re, i, suffix=f"_re_{i}"),
                            rw.emit(operator.getitem, pieces_im, i, suffix=f"_im_{i}")))
            for i in range(len(node.meta["val"]))]


@_rule(torch.ops.prims.sum)
def _prims_sum(rw: _Rewrite, node: Node, value: _Complex, dims: Optional[list], *,
               output_dtype: Optional[torch.dtype] = None) -> _Complex:
    re, im = rw.lazy_parts(value)
    dtype = REAL_OF.get(output_dtype, output_dtype) if output_dtype is not None else None
    extra = {"output_dtype": dtype} if dtype is not None else {}
    return rw.complex_of(node, rw.emit(node.target, re, dims, suffix="_re", **extra),
                         None if im is None else rw.emit(node.target, im, dims, suffix="_im", **extra))


@_rule(torch.ops.prims.var)
def _prims_var(rw: _Rewrite, node: Node, value: _Complex, dims: Optional[list], correction: float = 1, *,
               output_dtype: Optional[torch.dtype] = None) -> Node:
    """The variance of complex values is real: the mean of |z - mean|^2, the two parts' variances."""
    re, im = rw.parts(value)
    return rw.real_result(node, rw.add(rw.emit(node.target, re, dims, correction, suffix="_re"),
                                       rw.emit(node.target, im, dims, correction, suffix="_im")))


@_rule(aten.eq, aten.ne)
def _equal(rw: _Rewrite, node: Node, a: Operand, b: Operand) -> Node:
    (ar, ai), (br, bi) = rw.lazy_parts(a), rw.lazy_parts(b)
    like = next(p for p in (ar, br) if isinstance(p, Node))
    ai, bi = rw.tensor_like(ai, like), rw.tensor_like(bi, like)
    if node.target.overloadpacket is aten.eq:
        return rw.emit(aten.logical_and.default, rw.emit(aten.eq.Tensor, rw.tensor_like(ar, like), br
                                                         if isinstance(br, Node) else rw.tensor_like(br, like)),
                       rw.emit(aten.eq.Tensor, ai, bi))
    return rw.emit(aten.logical_or.default, rw.emit(aten.ne.Tensor, rw.tensor_like(ar, like), br
                                                    if isinstance(br, Node) else rw.tensor_like(br, like)),
                   rw.emit(aten.ne.Tensor, ai, bi))


@_rule(aten.isnan)
def _isnan(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    re, im = rw.parts(value)
    return rw.emit(aten.logical_or.default, rw.emit(aten.isnan.default, re), rw.emit(aten.isnan.default, im))


@_rule(aten.logical_not)
def _logical_not(rw: _Rewrite, node: Node, value: _Complex) -> Node:
    re, im = rw.parts(value)
    return rw.emit(aten.logical_and.default, rw.emit(aten.eq.Scalar, re, 0), rw.emit(aten.eq.Scalar, im, 0))


@_rule(aten.zeros, aten.ones)
def _zeros_ones(rw: _Rewrite, node: Node, size: list, **kwargs: Any) -> _Complex:
    fill = 1.0 if node.target.overloadpacket is aten.ones else 0.0
    kwargs["dtype"] = REAL_OF[node.meta["val"].dtype]
    return rw.complex_of(node, rw.emit(aten.full.default, size, fill, suffix="_re", **kwargs),
                         rw.emit(aten.full.default, size, 0.0, suffix="_im", **kwargs))


@_rule(aten.zero, aten.fill)
def _fill(rw: _Rewrite, node: Node, value: _Complex, fill: Any = 0) -> _Complex:
    if isinstance(fill, (Node, _Complex)):
        raise NotRealPairs("fill with a tensor value")
    fill = complex(fill)
    re = rw.lazy_parts(value)[0]
    return rw.complex_of(node, rw.emit(aten.full_like.default, re, fill.real, suffix="_re"),
                         rw.emit(aten.full_like.default, re, fill.imag, suffix="_im"))


@_rule(aten.addmm)
def _addmm(rw: _Rewrite, node: Node, bias: Operand, a: Operand, b: Operand, *, beta: Any = 1,
           alpha: Any = 1) -> _Complex:
    """bias + a @ b as four real products; other beta and alpha stay PyTorch's."""
    if beta != 1 or alpha != 1:
        return rw.pytorch_call(node, (bias, a, b), {"beta": beta, "alpha": alpha})
    (ar, ai), (br, bi), (cr, ci) = rw.lazy_parts(a), rw.lazy_parts(b), rw.lazy_parts(bias)

    def mm(x: Any, y: Any) -> Any:
        return None if x is None or y is None else rw.emit(aten.mm.default, x, y)
    return rw.complex_of(node, rw.add(cr, rw.sub(mm(ar, br), mm(ai, bi))),
                         rw.add(ci, rw.add(mm(ar, bi), mm(ai, br))))


@_rule(aten.reciprocal)
def _reciprocal(rw: _Rewrite, node: Node, value: _Complex) -> _Complex:
    return _div(rw, node, 1.0, value)


# The elementary functions (exp, log, sqrt, pow, the trigonometric and hyperbolic functions) register
# their rules from their own module; imported last, once the rewrite they build on is defined.
from compiler_core.decomp import complex_functions  # noqa: E402,F401
