"""Which forward nodes may be recomputed in the backward, and why the others may not.

    bans = recompute_bans(facts)          # {node: Ban(reason, hard)}
    recompute_flops(node), value_bytes(node)

A *hard* ban is about correctness or the unknown: a random op (recomputing would draw new numbers),
an op that mutates, a reader of an input the forward mutates, a comparison of a value with its own max (one side
recomputed may differ from the other in its last bit), an op we know nothing about. A *soft*
ban is a cost heuristic: a matmul/conv/attention (many FLOPs per byte saved), a reduction whose output
is much smaller than its inputs, a node very far from the backward. The activation budget lifts soft
bans, the cheapest to recompute first; hard bans always stand.

Random ops: we ban them and save what the forward drew (the dropout mask, or the random tensor if
that is smaller); we do not replay seeds. The backward then sees exactly the mask the forward used.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch

from compiler_core import _compat
from compiler_core.autodiff.joint import JointFacts, is_primal

aten = torch.ops.aten
Node = torch.fx.Node
def _packets(*names: str) -> frozenset:
    """ATen overload packets by name; a name this torch version lacks is left out."""
    return frozenset(getattr(aten, n) for n in names if hasattr(aten, n))


# Many FLOPs per output element: recomputing these costs real time, so we prefer saving them.
COMPUTE_INTENSIVE = _packets(
    "mm", "bmm", "addmm", "baddbmm", "convolution", "convolution_backward", "upsample_bilinear2d",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention",
    "_flash_attention_forward", "_efficient_attention_forward",
)
# Cheap (about one FLOP per element) and pure, beyond ops tagged pointwise and views.
CHEAP = _packets(
    "sum", "mean", "amax", "amin", "var", "var_mean", "std", "prod", "argmax", "argmin", "any", "all", "max",
    "min", "clone", "_to_copy", "to", "full", "full_like", "zeros", "zeros_like", "ones", "ones_like", "empty",
    "empty_like", "new_zeros", "new_ones", "new_full", "scalar_tensor", "arange", "lift_fresh_copy", "cat",
    "stack", "index", "gather", "triu", "tril", "where", "masked_fill", "constant_pad_nd", "repeat", "copy",
    "fill", "embedding", "_softmax", "_log_softmax", "native_layer_norm", "native_group_norm",
    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training", "native_batch_norm",
    "_grad_sum_to_size", "sum_to_size", "logsumexp", "gelu", "silu", "sigmoid", "tanh", "relu",
    "threshold_backward", "gelu_backward", "native_dropout_backward", "isinf", "isnan", "bitwise_not", "rsub",
)
TOO_FAR = 100  # edges from the backward beyond which recomputing repeats a long stretch of the forward
REDUCTION_RATIO = 4  # an output this many times smaller than its inputs is cheaper to save


@dataclass(frozen=True)
class Ban:
    reason: str
    hard: bool  # True: never lifted, whatever the activation budget


def recompute_bans(facts: JointFacts) -> dict[Node, Ban]:
    """The forward nodes that may not be recomputed, each with its reason (primals are inputs,
    not recomputed, and are not listed)."""
    readers = _readers_of_mutated_inputs(facts)
    bans: dict[Node, Ban] = {}
    for node in facts.graph.nodes:
        if node.op != "call_function" or node in facts.tangent_closure:
            continue
        if node not in facts.forward:
            # computed for the backward only, from forward values: the cut places it on either side
            if _compares_with_a_value_computed_from_it(node):
                bans[node] = _COMPARISON_BAN
            continue
        ban = _ban(node, facts, readers)
        if ban is not None:
            bans[node] = ban
    return bans


def _ban(node: Node, facts: JointFacts, readers: dict[Node, Node]) -> Ban | None:
    target = node.target
    if target is operator.getitem:
        return None  # free; recomputing it means recomputing its tuple-producing parent
    packet = getattr(target, "overloadpacket", None)
    if is_random(node):
        return Ban(f"random op ({packet}): never recomputed, the forward's result (e.g. the dropout mask) is "
                   "saved, so the backward sees the same random numbers the forward used", hard=True)
    if _is_mutating(target):
        return Ban(f"mutates a tensor ({target}): must run once, in the forward", hard=True)
    if node in readers:
        return Ban(f"view or reader of input {readers[node].name}, which the forward mutates: recomputed in the "
                   "backward it would read the updated value", hard=True)
    if _compares_with_a_value_computed_from_it(node):
        return _COMPARISON_BAN
    if packet in COMPUTE_INTENSIVE:
        return Ban(f"expensive op ({packet}, ~{recompute_flops(node):,} FLOPs): cheaper to save than to "
                   "recompute", hard=False)
    if not (is_view(node) or _is_pointwise(target) or packet in CHEAP or _is_prim(target)):
        return Ban(f"not on our recompute list ({target}): unknown cost or side effects", hard=True)
    inputs = sum(value_bytes(i) for i in node.all_input_nodes)
    if not is_view(node) and value_bytes(node) * REDUCTION_RATIO < inputs:
        return Ban(f"reduction: its output is {inputs // max(value_bytes(node), 1)}x smaller than its inputs; "
                   "recomputing it would keep the larger inputs alive for the backward (more memory)", hard=False)
    dist = facts.dist_from_backward.get(node, 0)
    if TOO_FAR < dist < 10**9:
        return Ban(f"too far from the backward ({dist} ops): recomputing would repeat a long stretch of the "
                   "forward", hard=False)
    return None


_COMPARISON_NAMES = ("eq", "ne", "lt", "le", "gt", "ge")
COMPARISONS = _packets(*_COMPARISON_NAMES)
_COMPARISON_BAN = Ban("compares a value with one computed from it (`x == amax(x)`, max's index): split by the cut, "
                      "one side saved and one recomputed in another kernel, a last-bit difference between the two "
                      "would leave no element equal to the max; so the comparison runs in the forward, beside "
                      "the values it compares", hard=True)


def _compares_with_a_value_computed_from_it(node: Node) -> bool:
    """`x == amax(x)` (max's index, max-pooling's mask) or `x >= sort(x)[k]`: an exact decision
    between a value and a reduction of it. If the cut saves the reduction and recomputes x in the
    backward (or the reverse), the two come from different kernels; where those round x differently
    (the C++ kernels' libmvec exp did, until 2026-12-05: codegen/cpp/prelude.py) no element equals the
    saved max, and the index falls outside the tensor (IndexError) or the gradient reaches the wrong
    element. Our kernels now compute a pure function to the same bits in every loop; this keeps the
    decision safe from any rounding difference still to be found. Comparisons of two
    values computed separately (`a < b` in minimum's backward) or with a number (relu's `x > 0`)
    change only within an ulp of a tie, and stay recomputable."""
    target = node.target
    prim_comparison = _is_prim(target) and getattr(target, "__name__", "").split(".")[0] in _COMPARISON_NAMES
    if getattr(target, "overloadpacket", None) not in COMPARISONS and not prim_comparison:
        return False
    operands = [a for a in node.args[:2] if isinstance(a, Node)]
    if len(operands) != 2 or not all(isinstance(v := a.meta.get("val"), torch.Tensor) and v.is_floating_point()
                                     for a in operands):
        return False
    a, b = operands
    return _computed_from(a, b) or _computed_from(b, a)


def _computed_from(value: Node, source: Node) -> bool:
    """Whether `value` is computed from `source` through at least one op that is not a view (a view
    of a value is that value, whichever side of the cut it is read on)."""
    if _only_views_between(value, source):
        return False
    stack, seen = [value], {value}
    while stack:
        for arg in stack.pop().all_input_nodes:
            if arg is source:
                return True
            if arg not in seen:
                seen.add(arg)
                stack.append(arg)
    return False


def _only_views_between(value: Node, source: Node) -> bool:
    node = value
    while node is not source:
        if not (node.op == "call_function" and is_view(node) and node.args and isinstance(node.args[0], Node)):
            return False
        node = node.args[0]
    return True


def _readers_of_mutated_inputs(facts: JointFacts) -> dict[Node, Node]:
    """Forward nodes that read a mutated primal directly or through views -> that primal."""
    readers: dict[Node, Node] = {}
    for primal in facts.mutated_primals:
        stack = list(primal.users)
        while stack:
            user = stack.pop()
            if user.op == "call_function" and user not in readers:
                readers[user] = primal
                if is_view(user):
                    stack.extend(user.users)
    return readers


def is_random(node: Node) -> bool:
    tags = getattr(node.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def is_view(node: Node) -> bool:
    """An op whose result aliases an input (its schema says so), or aten._unsafe_view (which does
    without saying: PITFALLS.md)."""
    target = node.target
    if getattr(target, "overloadpacket", None) in (aten._unsafe_view, aten.detach, aten.alias):
        return True
    schema = getattr(target, "_schema", None)
    return schema is not None and any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _is_mutating(target: object) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and schema.is_mutable


def _is_prim(target: object) -> bool:
    # prims.* are PyTorch's primitive set (where, broadcast_in_dim, convert_element_type, sum...):
    # pure, and element-wise or one pass over their input; random ones were refused above.
    return getattr(target, "namespace", None) == "prims"


def _is_pointwise(target: object) -> bool:
    return torch.Tag.pointwise in getattr(target, "tags", ())


def held_by_caller(node: Node) -> bool:
    """A primal or a view of one (a transposed weight): held by the caller, no new memory to save."""
    while node.op == "call_function" and is_view(node) and node.args and isinstance(node.args[0], Node):
        node = node.args[0]
    return is_primal(node)


def value_bytes(node: Node) -> int:
    """Bytes of the tensor a node produces (0 for anything else)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return _compat.size_hint(val.numel()) * val.element_size()
    return 0


def _numel(node: object) -> int:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return _compat.size_hint(val.numel()) if isinstance(val, torch.Tensor) else 0


def _shape(node: object) -> tuple[int, ...]:
    val = node.meta.get("val") if isinstance(node, Node) else None
    return tuple(_compat.size_hint(s) for s in val.shape) if isinstance(val, torch.Tensor) else ()


def recompute_flops(node: Node) -> int:
    """A rough FLOP count for running `node` once: exact enough to rank matmuls against pointwise ops."""
    if node.op != "call_function" or is_view(node) or node.target is operator.getitem:
        return 0
    packet = getattr(node.target, "overloadpacket", None)
    args = node.args
    if packet in (aten.mm, aten.addmm, aten.bmm, aten.baddbmm):
        a = args[1] if packet in (aten.addmm, aten.baddbmm) else args[0]
        return 2 * _numel(node) * (_shape(a)[-1] if _shape(a) else 1)
    if packet is aten.convolution:
        weight = _shape(args[1])
        return 2 * _numel(node) * math.prod(weight[1:]) if weight else _numel(node)
    if packet in COMPUTE_INTENSIVE and _shape(args[0]) and _shape(args[1]):
        q, k = _shape(args[0]), _shape(args[1])  # attention: QK^T and PV, each 2*L*S*E per head
        return 4 * math.prod(q[:-1]) * k[-2] * q[-1]
    return max([_numel(node)] + [_numel(i) for i in node.all_input_nodes])
