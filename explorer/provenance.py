"""Provenance both ways: an FX node -> its kernels, the exact generated lines and the user's Python
line; a generated line -> its FX nodes and their Python lines. Backward nodes carry the line of the
forward code they differentiate ("from the backward of line 4").

    prov = provenance(exploration)
    origin = prov.node(0, "exp")          # record 0 of session.all_records(), FX node "exp"
    origin.kernels                        # (("fused_softmax_0", (9, 12)),): lines 9 and 12 compute it
    origin.where                          # "line 4 in f: return torch.softmax(x, -1)"
    prov.at("cpp", "fused_softmax_0", 9)  # SourceLine: the code and its FX nodes

Everything comes from artifacts: KernelSource.line_origins (codegen records the FX nodes of each
line it emits), the primitive graph's node metadata (stack_trace, and partitioner_tag for forward or
backward) and, where a node has no stack trace, the Dynamo node it came from or, for a backward node,
the forward node with its autograd sequence number (seq_nr).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

from compiler_core.codegen.artifacts import KernelSource
from compiler_core.runtime.check import node_source_line
from compiler_core.session import GraphRecord
from explorer.exploration import Exploration
from explorer.why import computed_nodes

_LINE = re.compile(r"^(.*):(\d+) in ([^:]+): (.*)$")


@dataclass(frozen=True)
class NodeOrigin:
    record: int  # index into session.all_records()
    graph: str  # "graph 0" or "graph 0 (backward)"
    node: str  # FX node name in the primitive graph (the names kernels list as their source ops)
    target: str  # "aten.exp.default"
    part: str  # "forward"; "backward": a gradient op; "recomputed": a forward op run again in the backward
    user_line: str  # "file:line in function: code" of the user's line ("" when none is recorded)
    kernels: tuple[tuple[str, tuple[int, ...]], ...]  # (kernel, its source lines computing the node), session's backend
    extern: bool = False  # a library call (matmul, convolution...): no generated source

    @property
    def lineno(self) -> Optional[int]:
        found = _LINE.match(self.user_line)
        return int(found.group(2)) if found else None

    @property
    def where(self) -> str:
        """The user's line in words: "line 4 in f: y = x.exp()", "from the backward of line 4 in f: ...",
        "recomputed in the backward: line 4 in f: ..."; "no source line recorded" when there is none."""
        found = _LINE.match(self.user_line)
        if not found:
            return "no source line recorded"
        file, line, function, code = found.groups()
        place = f"line {line} in {function}" + ("" if file.startswith("<") else f" ({os.path.basename(file)})")
        text = f"{place}: {code}"
        if self.part == "backward":
            return f"from the backward of {text}"
        if self.part == "recomputed":
            return f"recomputed in the backward: {text}"
        return text

    @property
    def label(self) -> str:
        return self.node + ("" if self.graph == "graph 0" else f"  ({self.graph})")


@dataclass(frozen=True)
class SourceLine:
    backend: str
    kernel: str
    line: int  # 1-based, in the kernel's source
    code: str
    nodes: tuple[NodeOrigin, ...]  # the FX nodes the line computes (empty: a loop header, a pragma)


@dataclass(frozen=True)
class Provenance:
    nodes: tuple[NodeOrigin, ...]  # every FX node a loop node computes, graph by graph
    kernels: dict[str, tuple[KernelSource, ...]]  # backend -> kernels (as Exploration.kernels)
    kernel_records: dict[str, int]  # kernel name -> index of its record (forward and backward names differ)
    backend: str  # the session's backend: NodeOrigin.kernels are its kernels

    def node(self, record: int, name: str) -> NodeOrigin:
        try:
            return self._by_node[(record, name)]
        except KeyError:
            raise KeyError(f"no FX node {name!r} in record {record}") from None

    @cached_property
    def _by_node(self) -> dict[tuple[int, str], NodeOrigin]:
        # The Kernels tab asks for every origin of every kernel: a scan each took 0.15 s on a GPT-2.
        found: dict[tuple[int, str], NodeOrigin] = {}
        for origin in self.nodes:
            found.setdefault((origin.record, origin.node), origin)  # the first, as the scan found
        return found

    def kernel(self, backend: str, name: str) -> KernelSource:
        return next(k for k in self.kernels.get(backend, ()) if k.name == name)

    def kernels_of(self, record: int, name: str, backend: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(kernel, lines computing node `name`) for `backend`'s kernels of that record."""
        return tuple((k.name, k.lines_of(name)) for k in self.kernels.get(backend, ())
                     if self.kernel_records.get(k.name) == record and name in k.origins)

    def at(self, backend: str, kernel: str, line: int) -> SourceLine:
        source = self.kernel(backend, kernel)
        code = source.source.split("\n")[line - 1]
        record = self.kernel_records.get(kernel)
        nodes = tuple(self.node(record, n) for n in source.nodes_at(line)
                      if record is not None and (record, n) in self._by_node)
        return SourceLine(backend, kernel, line, code, nodes)

    def line_choices(self, backend: str) -> list[tuple[str, tuple[str, str, int]]]:
        """(label, (backend, kernel, line)) for every generated line that computes something."""
        choices = []
        for k in self.kernels.get(backend, ()):
            lines = k.source.split("\n")
            choices += [(f"{k.name}:{line}  {lines[line - 1].strip()[:70]}", (backend, k.name, line))
                        for line, _ in k.line_origins]
        return choices


def provenance(exp: Exploration) -> Provenance:
    records = exp.session.all_records()
    kernel_records = {k.name: i for i, r in enumerate(records) for k in r.kernels}
    nodes = []
    forward_lines: dict[tuple[int, int], str] = {}  # (captured graph, seq_nr) -> the forward op's line
    for i, record in enumerate(records):
        graph = f"graph {record.captured.index}" + (" (backward)" if record.part == "backward" else "")
        fx = {n.name: n for n in record.prims.graph_module.graph.nodes} if record.prims is not None else {}
        externs = {o for n in record.loops.nodes if n.kind == "extern" for o in n.origins} if record.loops else set()
        lines = {name: node_source_line(node, record.captured.graph_module) for name, node in fx.items()}
        for name, node in fx.items():
            seq_nr = node.meta.get("seq_nr")
            if record.part == "forward" and lines[name] and seq_nr is not None:
                forward_lines.setdefault((record.captured.index, seq_nr), lines[name])
        computing: dict[str, list[KernelSource]] = {}  # FX node -> the kernels computing it, in order
        for kernel in record.kernels:
            for origin in dict.fromkeys(kernel.origins):
                computing.setdefault(origin, []).append(kernel)
        for name in computed_nodes(record):
            node = fx[name]
            line = lines[name] or forward_lines.get((record.captured.index, node.meta.get("seq_nr")), "")
            kernels = tuple((k.name, k.lines_of(name)) for k in computing.get(name, ()))
            nodes.append(NodeOrigin(record=i, graph=graph, node=name, target=str(node.target), part=_part(node, record),
                                    user_line=line, kernels=kernels, extern=name in externs))
    return Provenance(tuple(nodes), dict(exp.kernels), kernel_records, exp.backend)


def _part(node, record: GraphRecord) -> str:
    """forward, backward or recomputed, from the joint graph's partitioner tag (the graph's part
    where the tag is missing)."""
    tag = node.meta.get("partitioner_tag")
    backward = tag == "is_backward" if tag in ("is_forward", "is_backward") else record.part == "backward"
    if backward:
        return "backward"
    return "recomputed" if record.part == "backward" else "forward"
