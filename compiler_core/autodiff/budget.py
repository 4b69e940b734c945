"""The activation budget: trade saved bytes for recompute FLOPs by lifting soft recompute bans.

    banned = banned_at(bans, budget=0.5)          # hard bans + the costlier half of the soft ones
    curve = sweep(facts, bans)                    # BudgetPoint per budget in SWEEP

`activation_budget` is the fraction of soft bans (rules.py: matmul/conv/attention, reductions, nodes
far from the backward) kept in force. 1.0 keeps them all (the default min-cut); lower budgets lift
the cheapest to recompute first (fewest FLOPs per byte of their value), so pointwise chains go before
matmuls; 0.0 lifts every soft ban. Hard bans (random ops, mutations, unknown ops) always stand.
Lifting a ban only adds possible cuts, so a lower budget never makes the min-cut save more bytes.
"""

from __future__ import annotations

import operator

import torch

from compiler_core.autodiff.artifacts import BudgetPoint
from compiler_core.autodiff.joint import JointFacts, is_primal, is_tangent
from compiler_core.autodiff.mincut import min_cut
from compiler_core.autodiff.rules import Ban, recompute_flops, value_bytes

Node = torch.fx.Node
SWEEP = (1.0, 0.75, 0.5, 0.25, 0.0)


def lift_order(bans: dict[Node, Ban]) -> list[Node]:
    """Soft-banned nodes, cheapest to recompute per byte first."""
    soft = [n for n, ban in bans.items() if not ban.hard]
    return sorted(soft, key=lambda n: recompute_flops(n) / max(value_bytes(n), 1))


def lifted_at(bans: dict[Node, Ban], budget: float) -> list[Node]:
    order = lift_order(bans)
    return order[:round((1.0 - budget) * len(order))]


def banned_at(bans: dict[Node, Ban], budget: float) -> set[Node]:
    return set(bans) - set(lifted_at(bans, budget))


def backward_needs(facts: JointFacts, saved: list[Node]) -> tuple[list[Node], list[Node]]:
    """(forward nodes the backward recomputes, saved values it reads) when `saved` is handed over."""
    saved_set, recomputed, used = set(saved), set(), set()
    stack = [n for n in facts.graph.nodes if n in facts.tangent_closure or n in facts.gradients]
    seen: set[Node] = set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if node in saved_set:
            used.add(node)
            continue
        if is_primal(node) or is_tangent(node):
            continue
        if node in facts.forward:
            recomputed.add(node)
        stack.extend(node.all_input_nodes)
    order = {n: i for i, n in enumerate(facts.graph.nodes)}
    return sorted(recomputed, key=order.get), sorted(used, key=order.get)


def estimate(facts: JointFacts, bans: dict[Node, Ban], budget: float,
             cuts: dict[frozenset, list[Node]] | None = None) -> BudgetPoint:
    """`cuts` caches min-cuts by banned set (the partition's own cut is one of the sweep's)."""
    saved = cut_at(facts, bans, budget, {} if cuts is None else cuts)
    recomputed, used = backward_needs(facts, saved)
    work = [n for n in recomputed if n.target is not operator.getitem]
    return BudgetPoint(budget, sum(value_bytes(n) for n in used), sum(recompute_flops(n) for n in work),
                       len(work), len(lifted_at(bans, budget)))


def cut_at(facts: JointFacts, bans: dict[Node, Ban], budget: float, cuts: dict[frozenset, list[Node]]) -> list[Node]:
    """The values the min-cut saves at `budget` (cached in `cuts`)."""
    banned = frozenset(banned_at(bans, budget))
    if banned not in cuts:
        cuts[banned] = min_cut(facts, set(banned))
    return cuts[banned]


def sweep(facts: JointFacts, bans: dict[Node, Ban], budgets: tuple[float, ...] = SWEEP,
          cuts: dict[frozenset, list[Node]] | None = None) -> tuple[BudgetPoint, ...]:
    """The memory/recompute curve: one min-cut per budget (budgets lifting the same bans share one)."""
    cuts = {} if cuts is None else cuts
    return tuple(estimate(facts, bans, budget, cuts) for budget in budgets)
