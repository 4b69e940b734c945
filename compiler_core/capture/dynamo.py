"""Capture with TorchDynamo: turn what Dynamo hands our backend into CapturedGraph, and collect
graph breaks (reason + user file:line) and recompiles (the failed guard) around a call."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator

import torch

from compiler_core import _compat
from compiler_core.capture.artifacts import CapturedGraph, GraphBreak, InputInfo, Recompile


def capture_graph(gm: torch.fx.GraphModule, example_inputs: list, index: int) -> CapturedGraph:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = []
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.Tensor):
            inputs.append(InputInfo(node.name, tuple(value.shape), tuple(value.stride()),
                                    str(value.dtype).replace("torch.", ""), str(value.device),
                                    bool(value.requires_grad)))
        else:
            inputs.append(InputInfo(node.name, (), (), type(value).__name__, "-", False))
    op_count = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    return CapturedGraph(index=index, graph_module=gm, inputs=tuple(inputs),
                         guards=_compat.dynamo_guards_text(gm), op_count=op_count)


class _BreakLog:
    """Reads Dynamo's global list of graph-break reasons incrementally."""

    def mark(self) -> int:
        return len(_compat.graph_break_reasons())

    def since(self, mark: int) -> list[GraphBreak]:
        out = []
        for reason in _compat.graph_break_reasons()[mark:]:
            frame = _user_frame(reason.user_stack)
            if frame is None:
                out.append(GraphBreak(_first_line(reason.reason), "<unknown>", 0, ""))
            else:
                out.append(GraphBreak(_first_line(reason.reason), frame.filename, frame.lineno or 0,
                                      frame.line or ""))
        return out


def _first_line(text: str) -> str:
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return lines[0].strip() if lines else str(text)


def _user_frame(stack: list):
    # The innermost frame outside torch itself is the user's line that caused the break.
    for frame in reversed(stack or []):
        if "/torch/" not in frame.filename:
            return frame
    return stack[-1] if stack else None


new_breaks = _BreakLog()


class _RecompileHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[Recompile] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        reasons = [ln.strip(" -") for ln in text.splitlines()[1:] if ln.strip()]
        self.records.append(Recompile(reasons[0] if reasons else text.strip()))


@contextlib.contextmanager
def recompile_watcher() -> Iterator[list[Recompile]]:
    """Collect Dynamo's recompile reasons logged during the block."""
    handler = _RecompileHandler()
    loggers = [logging.getLogger(name) for name in _compat.recompile_logger_names()]
    saved = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.DEBUG)
        lg.propagate = False  # keep the notebook quiet; the session shows it
    found: list[Recompile] = []
    try:
        yield found
    finally:
        for lg, (level, propagate) in zip(loggers, saved):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate
        found.extend(handler.records)
