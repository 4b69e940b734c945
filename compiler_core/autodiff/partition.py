"""Our partitioner: split a joint graph into the forward and backward graphs AOTAutograd runs.

    forward, backward, partition = partition_joint(joint, activation_budget=1.0)
    partition.saved, partition.saved_bytes, partition.recomputed, partition.banned

The steps, one module each: merge duplicate nodes (cse.py) -> facts about the joint (joint.py) ->
recompute bans with reasons (rules.py) -> the activation budget lifts some bans (budget.py) -> the
min-cut picks the values to save (mincut.py) -> AOTAutograd's graph extraction cuts the forward and
backward graph modules around those values (_compat.extract_forward_backward).

The forward returns its real outputs, then the saved tensors, then saved symints; the backward takes
the saved symints and tensors, then the tangents: the contract of AOTAutograd's `partition_fn`.
"""

from __future__ import annotations

import operator
from types import MappingProxyType

import torch

from compiler_core import _compat
from compiler_core.autodiff import budget as budgets
from compiler_core.autodiff.artifacts import JointGraph, Partition, SavedTensor
from compiler_core.autodiff.cse import merge_duplicates
from compiler_core.autodiff.joint import analyse, is_primal, is_tangent
from compiler_core.autodiff.placement import own_copies_for_gradients, place_recomputation_late
from compiler_core.autodiff.rules import held_by_caller, is_random, recompute_bans, value_bytes

Node = torch.fx.Node


def partition_joint(joint: JointGraph, activation_budget: float = 1.0,
                    sweep_budgets: tuple[float, ...] = budgets.SWEEP
                    ) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, Partition]:
    """Split `joint` (left unchanged) at the min-cut for `activation_budget` (0.0 ... 1.0)."""
    if not 0.0 <= activation_budget <= 1.0:
        raise ValueError(f"activation_budget={activation_budget} is not between 0.0 and 1.0")
    gm, merged = merge_duplicates(joint.graph_module, joint.num_fwd_outputs)
    facts = analyse(gm, joint.num_fwd_outputs)
    for node in gm.graph.find_nodes(op="placeholder"):
        if not (is_primal(node) or is_tangent(node)):
            # RNG seed/offset or backward-state inputs (AOTAutograd's functionalized randomness,
            # compiled autograd): our split does not model them.
            raise NotImplementedError(f"joint graph input {node.target!r} is neither a primal nor a tangent")
    bans = recompute_bans(facts)
    banned = budgets.banned_at(bans, activation_budget)
    cuts: dict = {}
    saved = budgets.cut_at(facts, bans, activation_budget, cuts)
    values = [n for n in saved if isinstance(n.meta.get("val"), torch.Tensor)]
    symints = [n for n in saved if n not in values]
    forward, backward = _compat.extract_forward_backward(gm, values, symints, joint.num_fwd_outputs)

    forward_names = {n.name for n in facts.forward}
    saved_names = {n.name for n in values + symints}
    recomputed = tuple(n.name for n in backward.graph.nodes
                       if n.op == "call_function" and n.name in forward_names and n.name not in saved_names
                       and n.target is not operator.getitem)
    # The copies are backward-graph nodes only: `recomputed` keeps naming joint-graph nodes.
    copies = own_copies_for_gradients(backward, set(recomputed))
    place_recomputation_late(backward, set(recomputed) | set(copies))
    notes = []
    if copies:
        shown = ", ".join(copies[:6]) + (", ..." if len(copies) > 6 else "")
        notes.append(f"the backward's gradient formulas got their own copies of {len(copies)} recomputed values "
                     f"({shown}): the scheduler may then make the recomputation and the gradient in separate "
                     "kernels where fusing them would raise the memory peak")
    if merged:
        notes.append(f"merged {merged} duplicate nodes of the joint graph before the cut (the backward's "
                     "formulas recompute values the forward has)")
    lifted = budgets.lifted_at(bans, activation_budget)
    if lifted:
        notes.append(f"activation_budget={activation_budget} lifted {len(lifted)} of "
                     f"{sum(not b.hard for b in bans.values())} soft bans: {', '.join(n.name for n in lifted)}")
    if any(is_random(n) for n in facts.forward):
        notes.append("random ops are never recomputed: the forward's random values (or the mask made from "
                     "them) are saved, so forward and backward agree")
    partition = Partition(
        saved=tuple(_saved_tensor(n) for n in values),
        saved_symints=tuple(n.name for n in symints),
        recomputed=recomputed,
        banned=MappingProxyType({n.name: ban.reason for n, ban in bans.items() if n in banned}),
        budget=activation_budget,
        sweep=budgets.sweep(facts, bans, sweep_budgets, cuts),
        notes=tuple(notes),
        forward_graph=forward,
        backward_graph=backward,
    )
    return forward, backward, partition


def _saved_tensor(node: Node) -> SavedTensor:
    val = node.meta["val"]
    shape = tuple(_compat.size_hint(s) for s in val.shape)
    dtype = str(val.dtype).replace("torch.", "")
    return SavedTensor(node.name, shape, dtype, value_bytes(node), "input" if held_by_caller(node) else "activation")


def fallback_partition(joint_module: torch.fx.GraphModule, joint_inputs: object, num_fwd_outputs: int, reason: str,
                       **kwargs: object) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule, Partition]:
    """AOTAutograd's default partition, described as a Partition (used when ours cannot split)."""
    forward, backward = _compat.default_partition(joint_module, joint_inputs, num_fwd_outputs, **kwargs)
    return forward, backward, describe_split(forward, num_fwd_outputs, partitioner="AOTAutograd default",
                                             notes=(f"our partitioner could not split this graph: {reason}",))


def describe_split(forward: torch.fx.GraphModule, num_fwd_outputs: int, partitioner: str,
                   notes: tuple[str, ...] = ()) -> Partition:
    """A Partition read off any forward graph module (ours, AOTAutograd's default, functorch's
    min-cut): what it saves, in bytes. Used for the fallback and to compare partitioners."""
    output = next(iter(forward.graph.find_nodes(op="output")))
    outs = list(output.args[0])[num_fwd_outputs:]
    values = [n for n in outs if isinstance(n, Node) and isinstance(n.meta.get("val"), torch.Tensor)]
    symints = [n.name for n in outs if isinstance(n, Node) and n not in values]
    return Partition(saved=tuple(_saved_tensor(n) for n in values), saved_symints=tuple(symints), recomputed=(),
                     banned=MappingProxyType({}), notes=notes, partitioner=partitioner, forward_graph=forward)
