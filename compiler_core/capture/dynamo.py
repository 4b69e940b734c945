"""Capture with TorchDynamo: turn what Dynamo hands our backend into CapturedGraph, and collect
graph breaks (reason + user file:line) and recompiles (the failed guard) around a call."""

from __future__ import annotations

import logging
from typing import Any

import torch

from compiler_core import _compat
from compiler_core.capture.artifacts import CapturedGraph, GraphBreak, InputInfo, Recompile


def capture_graph(gm: torch.fx.GraphModule, example_inputs: list, index: int) -> CapturedGraph:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = []
    for node, example in zip(placeholders, example_inputs):
        traced = _compat.fake_value(node)  # with dynamic shapes, sizes as Dynamo traced them: s0, s1...
        value = traced if isinstance(traced, torch.Tensor) and isinstance(example, torch.Tensor) else example
        if isinstance(value, torch.Tensor):
            inputs.append(InputInfo(node.name, _sizes(value.shape), _sizes(value.stride()),
                                    str(value.dtype).replace("torch.", ""), str(value.device),
                                    bool(value.requires_grad)))
        elif isinstance(value, torch.SymInt):
            inputs.append(InputInfo(node.name, (), (), "int size (symbolic)", "-", False))
        else:
            inputs.append(InputInfo(node.name, (), (), type(value).__name__, "-", False))
    op_count = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
    described = {_compat.placeholder_source(node): info for node, info in zip(placeholders, inputs)}
    guards = tuple(_guard_text(kind, name, described) for kind, name in _compat.dynamo_guards())
    return CapturedGraph(index=index, graph_module=gm, inputs=tuple(inputs), guards=guards, op_count=op_count)


def _sizes(values: Any) -> tuple:
    """Sizes or strides, each an int, or its symbol's text ("s0", "2*s1") when symbolic."""
    return tuple(v if isinstance(v, int) else str(v) for v in values)


_GLOBAL_GUARDS = {
    "GRAD_MODE": "grad mode (torch.is_grad_enabled()) is as when compiled",
    "DEFAULT_DEVICE": "the default device is as when compiled",
    "DETERMINISTIC_ALGORITHMS": "torch.use_deterministic_algorithms is as when compiled",
    "GLOBAL_STATE": "torch's global state (autocast, default dtype...) is as when compiled",
    "TORCH_FUNCTION_STATE": "the __torch_function__ mode stack is as when compiled",
    "AUTOGRAD_SAVED_TENSORS_HOOKS": "no saved-tensor hooks were added since",
    "SHAPE_ENV": "symbolic shape relations hold (dynamic shapes)",
}


def _guard_text(kind: str, name: str, inputs: dict[str, InputInfo]) -> str:
    """One guard as a sentence: what must still be true for this compiled graph to be reused."""
    if kind in _GLOBAL_GUARDS:
        return _GLOBAL_GUARDS[kind]
    if kind == "TENSOR_MATCH":
        info = inputs.get(name)
        if info is not None:
            return (f"{name} is a {info.dtype} tensor on {info.device} with shape {list(info.shape)}, stride "
                    f"{list(info.stride)}, requires_grad={info.requires_grad}")
        return f"{name} is a tensor with the same dtype, device, shape and strides"
    if kind in ("CONSTANT_MATCH", "EQUALS_MATCH"):
        return f"{name} has the same value as when compiled"
    if kind == "TYPE_MATCH":
        return f"{name} has the same type"
    if kind == "ID_MATCH":
        return f"{name} is the same object"
    return f"{kind.lower()}: {name}" if name else kind.lower()


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
    """Installed once: changing logger levels on every call clears logging's caches (slow)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.sink: list[Recompile] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.sink is None:
            return
        text = record.getMessage()
        if record.name == _compat.recompile_limit_logger_name():
            # "torch._dynamo hit config.recompile_limit (8) / function: 'wrapper' (file:line) / ..."
            if "hit config." in text:
                lines = [ln.strip() for ln in text.splitlines()]
                what = next((ln.removeprefix("function:").strip() for ln in lines if ln.startswith("function:")),
                            "a function")
                limit = lines[0].split("hit config.", 1)[1]
                self.sink.append(Recompile(
                    f"Dynamo hit its {limit} for {what}: from now on that function runs in eager PyTorch, not "
                    "compiled (each new object it guards on, e.g. a new optimizer, and each new input size was "
                    "one more compilation). Where sizes change from call to call (a KV cache growing a token "
                    "per call), leave dynamic at its default, None (symbolic once a size changes); else call "
                    "torch._dynamo.reset() or raise torch._dynamo.config.recompile_limit", limit_hit=True))
            return
        # "Recompiling function f in file:line / triggered by ... / - 0/0: tensor 'x' dtype mismatch"
        reasons = [ln.strip()[1:].strip() for ln in text.splitlines() if ln.strip().startswith("-")]
        self.sink.append(Recompile("; ".join(reasons) if reasons else text.strip()))


_handler: _RecompileHandler | None = None


def _install_handler() -> _RecompileHandler:
    global _handler
    if _handler is None:
        _handler = _RecompileHandler()
        _compat.enable_recompile_reasons()
        # Dynamo's own warning stays visible: only our handler is added to that logger.
        logging.getLogger(_compat.recompile_limit_logger_name()).addHandler(_handler)
        for name in _compat.recompile_logger_names():
            logger = logging.getLogger(name)
            logger.addHandler(_handler)
            logger.setLevel(logging.DEBUG)
            logger.propagate = False  # the session shows the reason; keep the notebook quiet
    return _handler


class _RecompileWatcher:
    """Collects Dynamo's recompile reasons logged between start() and stop() (nestable, cheap)."""

    def start(self) -> tuple:
        handler = _install_handler()
        found: list[Recompile] = []
        outer, handler.sink = handler.sink, found
        return handler, outer, found

    def stop(self, token: tuple) -> list[Recompile]:
        handler, outer, found = token
        handler.sink = outer
        return found


recompile_watcher = _RecompileWatcher()
