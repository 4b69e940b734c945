"""The fusion scheduler: LoopGraph -> Schedule.

Start with one group per loop node.  Repeatedly consider every pair of groups joined by a data
edge, decide whether they may share a kernel (and why not), score legal pairs by the bytes of
memory traffic fusion removes, and merge the best.  Every pair considered is kept as a
FusionDecision with its reason, so the explorer can answer "why was this not fused?".

Legality, in order: extern calls never fuse; two reductions must iterate the same space; fusing
must not create a cycle through a group outside the pair; and the kernel plan must build (every
node fits the kernel's space or is inlined into consumers inside it, and every read of a reduction
result lines up with the row computing it).  A node whose shape differs from the kernel's but has
as many elements (a reshape, flatten, transpose or permute lies between them) fits: it is placed by
index arithmetic.  Each refusal starts with its kind: extern, size, shape, reduction axis or
dependency.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from compiler_core.ir.graph import LoopGraph, LoopNode
from compiler_core.ir.symbolic import hint
from compiler_core.ir.values import Load, walk
from compiler_core.schedule.artifacts import FusionDecision, FusionGroup, Schedule
from compiler_core.schedule.horizontal import fuse_horizontally, renumbered
from compiler_core.schedule.kernel_plan import Space, placement, plan_refusal
from compiler_core.schedule.memory_order import GraphMemory, memory_order, memory_profile

# A fusion may raise the simulated memory peak by this fraction of it and still be taken.
PEAK_TOLERANCE = 1 / 64
SIBLING_LIMIT = 8  # sibling groups of one buffer and one element count considered pairwise; more: neighbours only


@dataclass
class _Group:
    members: list[str]  # topological order: members[0] is the earliest node
    space: Space
    kind: str  # "pointwise" | "reduction" | "extern" | "scatter" (a pointwise loop with a scatter's atomic adds)


FUSION_OFF = "fusion off (compile(..., fusion=False)): not merged"


def schedule(graph: LoopGraph, fusion: bool = True) -> Schedule:
    """Vertical and sibling fusion (this module), then horizontal fusion of what stays independent.
    `fusion=False`: one group per node; each candidate pair is still evaluated and logged, legal or
    not, with FUSION_OFF before its reason, never taken (and nothing is merged horizontally).

    Siblings over other iteration spaces (a pointwise reader beside a column sum of the same
    elements) are merged, then checked against the whole schedule's simulated peak: such a merge moves
    a kernel to where the other group's inputs are ready, which the round-by-round memory check
    (`_memory_refusal`) does not see in the final order. gpt_block's bf16 backward on the H200 planned
    208 MiB with them against 194 without, and held 56 MiB more beside cuDNN attention's workspace,
    while on the CPU the same merges saved a kernel each and 1 MiB. So when any was taken, the schedule
    without them is made too, and the one with the lower simulated peak is kept (ties: fewer kernels)."""
    scheduler = _Scheduler(graph, fusion)
    chosen, peak = _finished(graph, scheduler.run(), fusion)
    if scheduler.cross_space_merges:
        without, peak_without = _finished(graph, _Scheduler(graph, fusion, cross_space_siblings=False,
                                                            caches_of=scheduler).run(), fusion)
        if peak_without < peak:
            note = (f"memory: not taken; the schedule with {len(scheduler.cross_space_merges)} merge(s) of "
                    f"siblings over other iteration spaces peaks at {_mib(peak)}, without them at "
                    f"{_mib(peak_without)}")
            dropped = tuple(FusionDecision(d.first, d.second, d.legal, False, f"{note}; {d.reason}", d.bytes_saved)
                            for d in scheduler.cross_space_merges)
            chosen = Schedule(groups=without.groups, decisions=without.decisions + dropped)
    return chosen


def _finished(graph: LoopGraph, scheduled: Schedule, fusion: bool) -> tuple[Schedule, int]:
    if fusion:
        scheduled = fuse_horizontally(graph, scheduled, kernel_name)
    return _ordered(graph, scheduled)


def ordered_for_memory(graph: LoopGraph, sched: Schedule) -> Schedule:
    """`sched` with its steps in the order of lowest simulated memory peak (memory_order.py); the
    kernels are renamed so their numbers follow the new order."""
    return _ordered(graph, sched)[0]


def _ordered(graph: LoopGraph, sched: Schedule) -> tuple[Schedule, int]:
    order, peak = memory_order(graph, [(g.nodes, g.materialized) for g in sched.groups])
    if order == list(range(len(sched.groups))):
        return sched, peak
    groups = tuple(renumbered(sched.groups[i], position, graph, kernel_name) for position, i in enumerate(order))
    return Schedule.numbered(groups, sched.decisions), peak


class _Scheduler:
    def __init__(self, graph: LoopGraph, fusion: bool = True, cross_space_siblings: bool = True,
                 caches_of: "_Scheduler | None" = None):
        """`caches_of`: an earlier scheduler of the same graph whose plan verdicts and caches this one
        reuses (they depend on the graph and the members alone, not on which pairs are tried)."""
        self.graph = graph
        self.fusion = fusion
        # Siblings are paired by element count (True) or only within one iteration space (False).
        self.cross_space_siblings = cross_space_siblings
        self.cross_space_merges: list[FusionDecision] = []  # sibling merges taken across spaces
        self.order = {n.name: i for i, n in enumerate(graph.nodes)}
        self.nodes = {n.name: n for n in graph.nodes}
        self.producer_of = {b: n.name for b, n in graph.producers().items()}
        # Reader sets are dicts (insertion-ordered, in graph order): walks over them, and so the decision
        # log and the node a refusal names, are the same in every process (a set's order follows the
        # per-process string hash).
        self.readers: dict[str, dict[str, None]] = {}  # node -> nodes reading its output
        for n in graph.nodes:
            for b in n.input_buffers:
                if b in self.producer_of:
                    self.readers.setdefault(self.producer_of[b], {})[n.name] = None
        self.graph_outputs = graph.output_buffers()
        self.buffer_readers: dict[str, dict[str, None]] = {}  # any buffer (graph inputs too) -> its readers
        for n in graph.nodes:
            for b in n.input_buffers:
                self.buffer_readers.setdefault(b, {})[n.name] = None
        # Symbolic sizes: the example call's bytes (fusion's memory heuristics; never a question of correctness).
        self.buffer_bytes = {b.name: hint(b.nbytes) for b in graph.inputs}
        self.buffer_bytes.update({b.name: hint(b.nbytes) for n in graph.nodes for b in (n.output, *n.extra_outputs)})
        # The groups in a topological order (`None` where a merge left a hole), kept valid through every
        # merge, so the cycle check walks only the groups between a pair, not everything downstream.
        self.topo: list[_Group | None] = [
            _Group([n.name], Space.of(n) if n.kind != "extern" else Space(()), n.kind) for n in graph.nodes]
        self.position = {id(g): i for i, g in enumerate(self.topo)}
        self.group_of: dict[str, _Group] = {g.members[0]: g for g in self.topo}
        self.decisions: dict[tuple, FusionDecision] = {}
        # Whether a set of nodes forms one kernel depends on those nodes alone: build each plan once.
        self.plan_verdicts: dict[tuple[tuple[str, ...], Space], str | None] = {}
        self.recomputed: dict = {}  # kernel_plan.build_kernel_plan's cache of producers recomputed at a load
        self.merged_space: dict[tuple[int, int], Space] = {}  # legal pair -> the fused kernel's space
        self._profile = None
        self._producers = {}
        self._round_groups: list[_Group] = []  # the groups as this round began (_merge_round)
        self._memory: GraphMemory | None = None  # memory_order's facts of the graph, made when first needed
        self._written: dict[tuple[str, ...], tuple[str, ...]] = {}  # members -> buffers the group writes
        self._outside: dict[frozenset[str], frozenset[str]] = {}  # members -> what _materialized says
        self._saved: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}  # pair's members -> _bytes_saved
        if caches_of is not None and caches_of.graph is graph:
            self.plan_verdicts, self.recomputed = caches_of.plan_verdicts, caches_of.recomputed
            self._written, self._memory = caches_of._written, caches_of._memory

    # ---- main loop ----------------------------------------------------------------------
    def run(self) -> Schedule:
        while True:
            self._compact()
            self._profile = None  # memory_order's profile of this round's groups, made when first needed
            self._producers: dict[int, set[int]] = {}
            self.merged_space.clear()
            pairs = self._candidate_pairs()
            self._round_groups = self.groups
            if not self.fusion:
                for a, b in pairs:
                    decision = self._evaluate(a, b)
                    self.decisions[(tuple(a.members), tuple(b.members))] = FusionDecision(
                        decision.first, decision.second, decision.legal, False, f"{FUSION_OFF}; {decision.reason}",
                        decision.bytes_saved)
                break
            if not self._merge_round(pairs):
                break
        return Schedule.numbered(tuple(self._finish(g, i) for i, g in enumerate(self._ordered_groups())),
                                 tuple(self.decisions.values()))

    def _merge_round(self, pairs: list[tuple[_Group, _Group]]) -> bool:
        """One round of merges; False when no pair could merge.

        Pairs are taken best first (bytes saved; ties in candidate order) while neither group has
        merged this round. A group with a producer/consumer merge open this round takes that first: a
        sibling merge taken instead can pull a consumer's private producer (GELU's derivative, read
        only by the gradient's product) into another kernel, which then stores it for the consumer,
        where the chain itself would have fused; its sibling merges wait for a later round. Pairs
        that do not touch a group merged this round are merged in the same round (their kernel plans
        are unaffected), after a fresh cycle check.

        A pair is judged (its kernel plan built or refused, the memory check) only when the walk
        reaches it with both groups unmerged, or when a sibling pair asks whether a group has a legal
        producer/consumer pair: judging every candidate every round made 4,500 plans for a 1,000-node
        graph, 2,000 of them legal, of which 860 merged. Each judgement sees the groups as they were
        when the round began, so the merges are the ones judging everything first would take."""
        start_group_of, start_position = dict(self.group_of), dict(self.position)
        verdicts: dict[int, FusionDecision] = {}

        def judged(i: int) -> FusionDecision:
            if i not in verdicts:
                now = self.group_of, self.position
                self.group_of, self.position = start_group_of, start_position
                try:
                    verdicts[i] = self._evaluate(*pairs[i])
                finally:
                    self.group_of, self.position = now
            return verdicts[i]

        linked = [self._linked(a, b) for a, b in pairs]
        chain_pairs: dict[int, list[int]] = {}
        for i, (a, b) in enumerate(pairs):
            if linked[i]:
                chain_pairs.setdefault(id(a), []).append(i)
                chain_pairs.setdefault(id(b), []).append(i)
        chained: dict[int, bool] = {}

        def has_chain_merge(g: _Group) -> bool:
            if id(g) not in chained:
                chained[id(g)] = any(judged(i).legal for i in chain_pairs.get(id(g), ()))
            return chained[id(g)]

        saved = [self._saved_by(a, b) for a, b in pairs]
        touched: set[int] = set()
        accepted: list[int] = []
        for i in sorted(range(len(pairs)), key=lambda i: -saved[i]):
            a, b = pairs[i]
            if id(a) in touched or id(b) in touched or not judged(i).legal:
                continue
            if not linked[i] and (has_chain_merge(a) or has_chain_merge(b)):
                continue
            if touched and self._creates_cycle(a, b):
                continue
            accepted.append(i)
            if not linked[i] and a.space != b.space:
                self.cross_space_merges.append(verdicts[i])
            touched |= {id(a), id(b), id(self._merge(a, b))}
        # The log in candidate order, as judging every pair first wrote it; taken pairs say so.
        for i in sorted(verdicts):
            self.decisions[(tuple(pairs[i][0].members), tuple(pairs[i][1].members))] = verdicts[i]
        for i in accepted:
            d = verdicts[i]
            self.decisions[(d.first, d.second)] = FusionDecision(d.first, d.second, True, True, d.reason,
                                                                 d.bytes_saved)
        return bool(accepted)

    def _linked(self, a: _Group, b: _Group) -> bool:
        """Whether one group reads the other (producer and consumer), not only a common input."""
        return (any(r in b.members for m in a.members for r in self.readers.get(m, ()))
                or any(r in a.members for m in b.members for r in self.readers.get(m, ())))

    @property
    def groups(self) -> list[_Group]:
        return [g for g in self.topo if g is not None]

    def _compact(self) -> None:
        self.topo = self.groups
        self.position = {id(g): i for i, g in enumerate(self.topo)}

    def _candidate_pairs(self) -> list[tuple[_Group, _Group]]:
        """Producer/consumer pairs, then siblings: groups reading a common buffer (fusing them reads it
        once) over the same number of elements. Their spaces may differ: a pointwise reader of [rows,
        cols] and a column sum over it (a layer norm's input gradient beside its weight's) fuse with
        the pointwise nodes placed into the reduction's loops by index arithmetic."""
        group_of = self.group_of
        pairs, seen = [], set()

        def add(a: _Group, b: _Group) -> None:
            if a is not b and (id(a), id(b)) not in seen and (id(b), id(a)) not in seen:
                seen.add((id(a), id(b)))
                pairs.append((a, b))

        for producer, readers in self.readers.items():
            for reader in sorted(readers, key=self.order.get):
                add(group_of[producer], group_of[reader])
        for reader_nodes in self.buffer_readers.values():
            by_numel: dict[int | Space, list[_Group]] = {}
            for g in {id(group_of[n]): group_of[n] for n in reader_nodes}.values():
                if g.kind != "extern":
                    by_numel.setdefault(_numel(g.space) if self.cross_space_siblings else g.space, []).append(g)
            for groups in by_numel.values():
                groups.sort(key=lambda g: self.order[g.members[0]])
                if len(groups) <= SIBLING_LIMIT:
                    for i, a in enumerate(groups):
                        for b in groups[i + 1:]:
                            add(a, b)
                else:
                    # Many readers (hundreds of slices of one tensor, a learning rate read by every
                    # parameter's update): neighbours only, so each round builds a linear number of
                    # plans; merged neighbours meet their next neighbours in the following rounds.
                    for a, b in zip(groups, groups[1:]):
                        add(a, b)
        return pairs

    # ---- legality and score ---------------------------------------------------------------
    def _evaluate(self, a: _Group, b: _Group) -> FusionDecision:
        def verdict(legal: bool, reason: str, saved: int = 0) -> FusionDecision:
            return FusionDecision(tuple(a.members), tuple(b.members), legal, False, reason, saved)

        if a.kind == "extern" or b.kind == "extern":
            ext = a if a.kind == "extern" else b
            return verdict(False, f"extern: {ext.members[0]} is an extern call "
                                  f"({self.nodes[ext.members[0]].extern.reason})")
        refusal = self._scatter_refusal(a, b)
        if refusal is not None:
            return verdict(False, refusal)
        spaces = self._candidate_spaces(a, b)
        if not spaces:
            return verdict(False, _reduction_mismatch(a.space, b.space))
        between = self._node_between(a, b)
        if between is not None:
            return verdict(False, f"dependency: {between} (in neither group) reads one group and feeds the other, "
                                  "so fusing would create a cycle")
        members = sorted(a.members + b.members, key=self.order.get)
        refusal = None
        for space in spaces:
            refusal = self._plan_refusal(members, space)
            if refusal is None:
                break
        if refusal is not None:
            return verdict(False, refusal)
        self.merged_space[(id(a), id(b))] = space
        saved = self._bytes_saved(a, b)
        kinds = "+".join(sorted({a.kind, b.kind}))
        linked = self._linked(a, b)
        if self.fusion:
            refusal = self._memory_refusal(a, b)
            if refusal is not None:
                self.merged_space.pop((id(a), id(b)))
                return verdict(False, refusal)
        relation = "" if linked else "; siblings sharing an input"
        other = b.space if space == a.space else a.space
        if other == space or other.is_reduction or space.is_reduction and other.x == space.x:
            how = f"same iteration space ({space.describe()})"
        elif _numel(other) == _numel(space):  # a reshape, transpose or permute between the two: no copy
            how = f"one iteration space ({space.describe()}; {other.describe()} placed by index arithmetic)"
        else:  # a broadcast or a slice: the other group's values are recomputed where they are read
            how = f"one iteration space ({space.describe()}; {other.describe()} recomputed where it is read)"
        return verdict(True, f"{how}, {kinds}{relation}", saved)

    def _scatter_refusal(self, a: _Group, b: _Group) -> str | None:
        """A scatter ends its kernel's writes to its buffer (kernel_plan's check says the same when a plan
        is built; here it is said before any space is tried): its destination is made by an earlier
        kernel, and what reads its result runs in a later one."""
        for x, y in ((a, b), (b, a)):
            if x.kind != "scatter":
                continue
            inside_y = set(y.members)
            for m in x.members:
                node = self.nodes[m]
                if node.kind != "scatter":
                    continue
                if self.producer_of.get(node.destination) in inside_y:
                    return (f"scatter: {m} adds into {node.destination}, which must be complete before the first "
                            "add: another kernel writes it")
                reader = next((r for r in self.readers.get(m, ()) if r in inside_y), None)
                if reader is not None:
                    return (f"scatter: {m} is complete only when its kernel ends (other programs add into the same "
                            f"elements), so {reader}, which reads it, runs in a later kernel")
        return None

    def _memory_refusal(self, a: _Group, b: _Group) -> str | None:
        """Why two groups may not share a kernel for memory's sake, or None.

        The fused kernel waits for both groups' inputs, so the outputs of the one that could run
        earlier are born next to whatever the other's inputs hold alive. A backward's recomputed GELU
        output fused with the GELU's gradient (both read the saved pre-activation) is made after the
        matmul producing the incoming gradient, so three 8 MiB tensors live at once where, apart, the
        recomputation and the weight-gradient matmul reading it finish first.

        Estimated on the memory order of this round's groups (memory_order.py, computed once a
        round): group X's outputs read outside the pair, made where Y runs, are added to what Y's
        step holds; refused when that is above the round's peak. Only where it can happen: X writes
        such outputs and Y waits for a producer X does not wait for. A rise within PEAK_TOLERANCE is
        taken for the traffic the fusion saves (an optimizer's step counter, a few bytes made later)."""
        producers = {id(g): self._producer_groups(g) - {id(a), id(b)} for g in (a, b)}
        if producers[id(a)] == producers[id(b)]:
            return None  # neither waits for anything the other does not
        outside = self._materialized(a.members + b.members)
        if not outside:
            return None
        for x, y in ((a, b), (b, a)):
            # A graph output lives to the end whenever it is made: making it later holds nothing longer.
            delayed = [self.nodes[m].output.name for m in x.members
                       if self.nodes[m].output.name in outside and self.nodes[m].output.name not in self.graph_outputs]
            if not delayed or not producers[id(y)] - producers[id(x)]:
                continue
            profile, index = self._round_profile()
            if profile.position[index[id(x)]] > profile.position[index[id(y)]]:
                continue  # x runs after y already: merging delays nothing of x's
            extra = sum(self.buffer_bytes.get(name, 0) for name in delayed)
            held = profile.held[index[id(y)]] + extra
            if held - profile.peak > profile.peak * PEAK_TOLERANCE:
                return (f"memory: fusing would raise the memory peak from {_mib(profile.peak)} to about "
                        f"{_mib(held)}: the fused kernel waits for {self._first_extra(x, y)}, so "
                        f"{', '.join(delayed[:3])} ({_mib(extra)}) would be made while its inputs are alive")
        return None

    def _first_extra(self, x: _Group, y: _Group) -> str:
        mine = self._producer_groups(x)
        for m in y.members:
            for b in self.nodes[m].input_buffers:
                p = self.producer_of.get(b)
                if p is not None and id(self.group_of[p]) not in mine and self.group_of[p] not in (x, y):
                    return b
        return "the other group's inputs"

    def _producer_groups(self, g: _Group) -> set[int]:
        """Ids of the groups `g` reads from (cached for the round: groups change only by merging)."""
        if id(g) not in self._producers:
            self._producers[id(g)] = {id(self.group_of[self.producer_of[b]]) for m in g.members
                                      for b in self.nodes[m].input_buffers if b in self.producer_of}
        return self._producers[id(g)]

    def _round_profile(self):
        if self._profile is None:
            groups = self._round_groups  # as the round began (pairs are judged on that state)
            if self._memory is None:
                self._memory = GraphMemory.of(self.graph)
            self._profile = (memory_profile(self._memory, [self._step(g.members, g.kind) for g in groups]),
                             {id(g): i for i, g in enumerate(groups)})
        return self._profile

    def _step(self, members: list[str], kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        key = tuple(members)
        if key not in self._written:  # a group's writes depend on its members alone
            self._written[key] = tuple([self.nodes[m].output.name for m in members] if kind == "extern"
                                       else sorted(self._materialized(members)))
        return key, self._written[key]

    def _plan_refusal(self, members: list[str], space: Space) -> str | None:
        key = (tuple(members), space)
        if key not in self.plan_verdicts and self._elementwise_chain(members, space):
            self.plan_verdicts[key] = None
        if key not in self.plan_verdicts:
            self.plan_verdicts[key] = plan_refusal(self.graph, members, self._materialized(members), space,
                                                   self.recomputed)
        return self.plan_verdicts[key]

    # Below the plan's inlining depth limit (kernel_plan.resolve refuses chains past 120).
    CHAIN_FAST_PATH_MAX = 60

    def _elementwise_chain(self, members: list[str], space: Space) -> bool:
        """Whether building the plan cannot refuse: pointwise nodes over exactly this space, each reading
        the others only at the element it stands on (a producer's own store index, no mask, no
        positions), so inlining maps every variable to itself. Building plans was 90% of scheduling
        time on a 1,000-node graph, most of it for candidates like these."""
        if space.is_reduction or len(members) >= self.CHAIN_FAST_PATH_MAX:
            return False
        nodes = [self.nodes[m] for m in members]
        produced = {n.output.name: n for n in nodes}
        for node in nodes:
            if node.kind != "pointwise" or tuple(node.ranges) != space.x:
                return False
            for v in walk(node.body):
                if isinstance(v, Load) and v.buffer in produced:
                    if v.mask is not None or v.indirect or v.index != produced[v.buffer].store_index:
                        return False
        return True

    def _candidate_spaces(self, a: _Group, b: _Group) -> list[Space]:
        """Iteration spaces the fused kernel may have, best first (empty: two different reductions)."""
        if a.space.is_reduction and b.space.is_reduction:
            return [a.space] if a.space == b.space else []
        if a.space.is_reduction:
            return [a.space]
        if b.space.is_reduction:
            return [b.space]
        # Two pointwise groups: the larger space first (the smaller group's nodes are placed into it by
        # index arithmetic, or inlined); then the smaller one, which fits when the larger group's nodes
        # are only read inside the kernel (`(x + 1)[:, 1:3].exp()` computes just the slice).
        larger, smaller = (a, b) if hint(_numel(a.space)) >= hint(_numel(b.space)) else (b, a)
        return [larger.space] if larger.space == smaller.space else [larger.space, smaller.space]

    def _creates_cycle(self, a: _Group, b: _Group) -> bool:
        return self._node_between(a, b) is not None

    def _node_between(self, a: _Group, b: _Group) -> str | None:
        """A node outside the pair that depends on one group and feeds the other, or None.

        Walks forward from the pair through outside groups; reaching the pair again is a cycle. A path
        back into the pair runs through groups placed before the later of the two in the topological
        order, so groups placed after it are never walked (the walk stays near the pair)."""
        limit = max(self.position[id(a)], self.position[id(b)])
        seen = {id(a), id(b)}
        frontier = [self.group_of[r] for g in (a, b) for m in g.members for r in self.readers.get(m, ())]
        while frontier:
            g = frontier.pop()
            if id(g) in seen or self.position[id(g)] > limit:
                continue
            seen.add(id(g))
            for m in g.members:
                for r in self.readers.get(m, ()):
                    reader = self.group_of[r]
                    if reader is a or reader is b:
                        return m
                    frontier.append(reader)
        return None

    def _materialized(self, members: list[str]) -> frozenset[str]:
        """Buffers a group must write: read outside it, or returned by the graph. Asked about the same
        members by every evaluation of a pair they are in (11,000 times in a 1,000-node schedule): kept."""
        inside = frozenset(members)
        out = self._outside.get(inside)
        if out is None:
            out = self._outside[inside] = frozenset(
                self.nodes[m].output.name for m in members if self.nodes[m].output.name in self.graph_outputs
                or any(r not in inside for r in self.readers.get(m, ())))
        return out

    def _saved_by(self, a: _Group, b: _Group) -> int:
        """_bytes_saved, kept by members: every round ranks every candidate pair, and most pairs come
        back unchanged in the next round."""
        key = (tuple(a.members), tuple(b.members))
        if key not in self._saved:
            self._saved[key] = self._bytes_saved(a, b)
        return self._saved[key]

    def _bytes_saved(self, a: _Group, b: _Group) -> int:
        before = self._materialized(a.members) | self._materialized(b.members)
        after = self._materialized(a.members + b.members)
        # Buffers both groups read from memory are read once by the fused kernel.
        produced = {self.nodes[m].output.name for m in a.members + b.members}
        shared = (self._reads(a) & self._reads(b)) - produced
        saved = sum(self.buffer_bytes.get(name, 0) for name in shared)
        for m in a.members + b.members:
            buf = self.nodes[m].output
            if buf.name in before and buf.name not in after:
                saved += 2 * hint(buf.nbytes)  # one write and one read less
            elif buf.name in before and any(r in b.members for r in self.readers.get(m, ())):
                saved += hint(buf.nbytes)  # still written, but not read back by the fused consumer
        return saved

    def _reads(self, g: _Group) -> set[str]:
        return {b for m in g.members for b in self.nodes[m].input_buffers}

    # ---- merging and output -----------------------------------------------------------------
    def _merge(self, a: _Group, b: _Group) -> _Group:
        space = self.merged_space[(id(a), id(b))]
        kind = "reduction" if space.is_reduction else "scatter" if "scatter" in (a.kind, b.kind) else "pointwise"
        merged = _Group(sorted(a.members + b.members, key=self.order.get), space, kind)
        for m in merged.members:
            self.group_of[m] = merged
        self._reorder(a, b, merged)
        return merged

    def _reorder(self, a: _Group, b: _Group, merged: _Group) -> None:
        """Keep `topo` a topological order: `merged` takes the later of the pair's places, and the groups
        between the two that depend on the earlier one move after it (none of them feeds the later one:
        that would be a cycle, refused before merging). Only the stretch between the pair changes."""
        lo, hi = sorted((self.position.pop(id(a)), self.position.pop(id(b))))
        first = self.topo[lo]
        after: set[int] = set()
        stack = [first]
        while stack:
            g = stack.pop()
            for m in g.members:
                for r in self.readers.get(m, ()):
                    h = self.group_of[r]
                    if id(h) not in after and lo < self.position.get(id(h), -1) < hi:
                        after.add(id(h))
                        stack.append(h)
        between = [g for g in self.topo[lo + 1:hi] if g is not None]
        stretch = [g for g in between if id(g) not in after] + [merged] + [g for g in between if id(g) in after]
        stretch = [None] * (hi - lo + 1 - len(stretch)) + stretch
        self.topo[lo:hi + 1] = stretch
        for i, g in enumerate(stretch, start=lo):
            if g is not None:
                self.position[id(g)] = i

    def _ordered_groups(self) -> list[_Group]:
        """Groups in an order that respects data dependencies (Kahn's algorithm; of the groups ready, the
        one with the earliest node first)."""
        groups = self.groups
        first_node = {id(g): self.order[g.members[0]] for g in groups}
        waiting_on = {id(g): set() for g in groups}
        feeds: dict[int, list[_Group]] = {id(g): [] for g in groups}
        for g in groups:
            for m in g.members:
                for b in self.nodes[m].input_buffers:
                    p = self.producer_of.get(b)
                    if p is not None and self.group_of[p] is not g and id(self.group_of[p]) not in waiting_on[id(g)]:
                        waiting_on[id(g)].add(id(self.group_of[p]))
                        feeds[id(self.group_of[p])].append(g)
        ready = [(first_node[id(g)], id(g), g) for g in groups if not waiting_on[id(g)]]
        heapq.heapify(ready)
        ordered: list[_Group] = []
        while ready:
            _, _, g = heapq.heappop(ready)
            ordered.append(g)
            for h in feeds[id(g)]:
                waiting_on[id(h)].discard(id(g))
                if not waiting_on[id(h)]:
                    heapq.heappush(ready, (first_node[id(h)], id(h), h))
        if len(ordered) != len(groups):
            raise RuntimeError("fusion produced a cycle between kernels")
        return ordered

    def _finish(self, g: _Group, index: int) -> FusionGroup:
        materialized = self._materialized(g.members)
        nodes = [self.nodes[m] for m in g.members]
        origins = tuple(dict.fromkeys(o for n in nodes for o in n.origins))
        name = kernel_name(nodes, index) if g.kind != "extern" else f"extern_{nodes[0].extern.target}"
        writes = tuple(n.output.name for n in nodes if n.output.name in materialized or g.kind == "extern")
        internal = tuple(n.output.name for n in nodes if n.output.name not in writes)
        return FusionGroup(name=name, kind=g.kind, nodes=tuple(g.members), x_ranges=g.space.x,
                           r_ranges=g.space.r, materialized=writes, internal=internal, origins=origins)


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**10:.1f} KiB"


def _reduction_mismatch(a: Space, b: Space) -> str:
    """Why two reduction groups cannot share a kernel: the kind of reason first."""
    spaces = f"({a.describe()} vs {b.describe()})"
    if a.full == b.full:
        axes = [[d for d, (role, _) in enumerate(s.roles) if role == "r"] for s in (a, b)]
        return (f"reduction axis: reductions over different iteration spaces {spaces}: both reduce "
                f"{list(a.full)}, one over dims {axes[0]}, the other over dims {axes[1]}")
    if _numel(Space(a.full)) == _numel(Space(b.full)):
        return f"shape: reductions over different iteration spaces {spaces}: same elements, other dims"
    return f"size: reductions over different iteration spaces {spaces}"


def _identifier(text: str) -> str:
    cleaned = "".join(c if c.isalnum() else "_" for c in text).strip("_").lower()
    return cleaned or "op"


def _numel(space: Space) -> int:
    total = 1
    for s in space.x + space.r:
        total *= s
    return total


def kernel_name(nodes: list[LoopNode], index: int) -> str:
    """`fused_layer_norm_gelu_0`: the user-level functions it computes, in order, then its position."""
    ops = []
    for n in nodes:
        op = _identifier(n.source_fn or n.origins[0].rstrip("0123456789").rstrip("_"))
        if op not in ops:
            ops.append(op)
    stem = "_".join(ops[:6]) + ("_etc" if len(ops) > 6 else "")
    return f"fused_{stem}_{index}" if len(nodes) > 1 else f"{stem}_{index}"


__all__ = ["schedule", "placement"]
