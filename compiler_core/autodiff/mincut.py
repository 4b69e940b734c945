"""The min-cut: which values the forward saves so the backward can run, at the fewest bytes.

    saved = min_cut(facts, banned)    # forward values to save, in graph order

The flow network, and why it is built this way:

- Every node N becomes two vertices, N_in -> N_out, joined by an edge whose capacity is the bytes of
  N's value. Cutting that edge means "N is computed on the forward side and handed over": saving N.
  Splitting the node charges a value once however many users read it (cutting the data edges
  instead would charge it once per user).
- Data edges N_out -> U_in for every user U have infinite capacity: the cut may never fall on an
  edge, only on a value.
- The source feeds every primal (inputs and parameters exist before anything runs) and every node
  banned from recompute: a banned node is forced onto the forward side, so if the backward needs it,
  it (or something computed from it) must be saved. A source edge into N_in rather than N_out keeps
  N's own edge cuttable, so saving it stays possible.
- The sink drains every node computed from a tangent (N_in -> sink: such a node only exists in the
  backward, so whatever it reads from the forward crosses the cut), and every gradient that does not
  depend on a tangent (N_out -> sink: its value must be available in the backward, saved or
  recomputed).
- A value that cannot be saved (a tuple from a multi-output op, a primal the forward mutates) gets an
  infinite N_in -> N_out edge; its getitems carry the bytes instead.
- A primal, or a view of one, costs 1 byte to save, not its size: the caller holds it (a parameter,
  the user's input, the logits a loss graph receives from the model's graph), so saving it keeps no
  memory alive that would otherwise be freed. Charged its size, a loss graph saved `exp(logits - max)`
  (as large as the logits, 206 MB for GPT-2's vocabulary at 1,024 tokens) instead of the logits it
  already held, and held both through the backward.

A finite cut then separates what the forward computes from what the backward needs: the cut edges
are the saved values; forward nodes left on the sink side are recomputed by the backward. Among all
such splits the min-cut saves the fewest bytes. With no finite cut (the backward needs a value that
can be neither saved nor recomputed) networkx raises NetworkXUnbounded and the caller falls back.
"""

from __future__ import annotations

import torch

from compiler_core.autodiff.joint import JointFacts, is_primal
from compiler_core.autodiff.rules import held_by_caller, value_bytes

Node = torch.fx.Node
SOURCE, SINK = "source", "sink"


def min_cut(facts: JointFacts, banned: set[Node]) -> list[Node]:
    import networkx as nx

    flow = nx.DiGraph()
    inf = {}  # networkx reads an edge without a capacity as infinite
    for node in facts.graph.nodes:
        if node.op == "output":
            continue
        if node in facts.tangent_closure:
            flow.add_edge(f"{node.name}_in", SINK, **inf)
            continue  # a backward node: what it reads is handled at the reader's side of the cut
        if node in facts.gradients:
            flow.add_edge(f"{node.name}_out", SINK, **inf)
        if is_primal(node) or node in banned:
            flow.add_edge(SOURCE, f"{node.name}_in", **inf)
        capacity = _save_cost(node, facts)
        flow.add_edge(f"{node.name}_in", f"{node.name}_out", **({} if capacity is None else {"capacity": capacity}))
        for user in node.users:
            if user.op != "output":
                flow.add_edge(f"{node.name}_out", f"{user.name}_in", **inf)
    if SINK not in flow or SOURCE not in flow:
        return []  # nothing in the backward reads the forward
    # Boykov-Kolmogorov: about 6x faster than networkx's default (preflow-push) on joint graphs of a
    # few thousand nodes (0.26 s vs 1.6 s, 8 GPT-2 blocks); the cut is the same.
    from networkx.algorithms.flow import boykov_kolmogorov

    _, (forward_side, _) = nx.minimum_cut(flow, SOURCE, SINK, flow_func=boykov_kolmogorov)
    return [n for n in facts.graph.nodes
            if n.op != "output" and f"{n.name}_in" in forward_side and f"{n.name}_out" not in forward_side
            and f"{n.name}_out" in flow]


def _save_cost(node: Node, facts: JointFacts) -> int | None:
    """Bytes to save `node`; None when it cannot be saved."""
    val = node.meta.get("val")
    if node in facts.mutated_primals:
        return None  # updated in place after the forward: the backward would see the new value
    if isinstance(val, torch.Tensor):
        return 1 if held_by_caller(node) else value_bytes(node)
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return 1  # saved beside the tensors as a Python number (MobileViT saves a SymFloat: n / (n - 1))
    return None
