"""Channels-last activations for convolution graphs: the layout cuDNN's tensor-core kernels run in.

A graph traced from an NCHW model hands every convolution an NCHW activation. cuDNN's fast kernels
read NHWC, so each call transposes its input to NHWC and its result back (`nchwToNhwcKernel`,
`nhwcToNchwKernel`): on the H200, 16 transposes in a bf16 ResNet step, a quarter of its kernel time,
and as many launches. Inductor avoids them by choosing channels-last for the whole graph; this pass
does the same as a rewrite of the ATen graph, before lowering:

- each convolution whose input is not already channels-last gets `clone(memory_format=channels_last)`
  in front of it (in practice only the first: the graph input);
- fake values are propagated again through the whole graph, so every op after a convolution
  (batch norm, ReLU, residual adds, pooling) gets channels-last metadata, and our lowering lays its
  buffers out that way: the kernels fused around the convolutions read and write NHWC directly;
- a view traced for NCHW that channels-last strides cannot express (flattening a feature map into a
  classifier) reads a contiguous copy instead, as `reshape` would;
- a graph output whose layout changed is copied back to the layout it was traced with, so callers
  see the strides eager PyTorch gives them.

Weights stay as they are on the GPU: cuDNN picks NHWC when either operand is channels-last, and
converting a weight is cheap beside an activation. On the CPU each weight gets a channels-last clone
too: ATen's mkldnn convolution otherwise calls `weight.contiguous(channels_last)` at every call, an
allocation and a copy through the dispatcher (about 8-15 us a convolution on the 2-core CPU, five per
call of the zoo's small ResNet), where our clone is one more pointwise kernel that the horizontal
fusion pass puts into one launch with the other small conversions at the start of the graph (as
Inductor converts its weights inside its own kernels). A convolution's real result is still checked against the
planned strides at run time (`rt.ensure_layout`), so a layout the metadata mispredicts costs a copy,
never a wrong answer.

Measured on the H200 (BENCHMARKS.md, 2026-12-02; time ratios ours/Inductor within one run each) it
did not pay: HF ResNet inference went from 1.24x (bf16) and 0.84x (fp32) in the traced layout to 1.78x
and 1.40x in channels-last, when our kernels still iterated in the logical (N, C, H, W) order and so
wrote a channels-last buffer with stride C between neighbouring elements. With the loop-order pass
(schedule/plan_passes.py: pointwise kernels iterate in their stores' memory order) it was 1.34x and
1.09x: better, still behind the traced layout. The reductions around the convolutions (max-pool,
average pool) keep the logical order, and were not profiled. And in fp32, cuDNN ran the NHWC
convolutions of a small ResNet in TF32 (PyTorch's default `torch.backends.cudnn.allow_tf32`) where
the NCHW ones ran exactly: 3x eager's error against fp64, which the zoo's check fails. So on the
GPU `conv_layout="auto"` keeps the traced layout for now, and `conv_layout="channels_last"` runs the
rewrite on request, to explore the layout.

On the CPU it pays, and "auto" takes it for inference graphs: oneDNN reorders an NCHW input into its
blocked layout at every call, an NHWC one it reads as is. HF ResNet (the zoo's small configuration,
2-core CPU, 2026-12-02) went from 0.41 to 0.32 ms a call (Inductor 0.29, which also picks
channels-last there): each convolution 60 us -> 33 us under torch.profiler. Training graphs keep the
traced layout: their saved activations are graph outputs, each copied back to the traced layout.

When it pays, Inductor's published reasons to stay NCHW are the place to start choosing it
automatically: grouped convolutions with more than one input channel per group, convolutions with
twice as many input as output channels, graphs with few convolutions.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.node import map_arg

from compiler_core import _compat
from compiler_core.decomp.artifacts import LayoutDecision

aten = torch.ops.aten

CHOICES = ("auto", "channels_last", "as_traced")
# Views whose traced sizes may not be expressible over channels-last strides.
VIEWS = (aten.view.default, aten._unsafe_view.default)


def choose_conv_layout(gm: torch.fx.GraphModule, choice: str, on_cpu_inference: bool = False,
                       on_cpu: bool = False) -> LayoutDecision:
    """Decide, and when channels-last is chosen rewrite `gm` in place (module docstring). Returns the
    decision; a graph the rewrite cannot handle is left exactly as it was, with the reason.
    `on_cpu_inference`: the graph runs on the CPU with no backward, where "auto" picks channels-last.
    `on_cpu`: the graph runs on the CPU, where the rewrite converts the weights too."""
    if choice not in CHOICES:
        raise ValueError(f"conv_layout={choice!r} is not one of {CHOICES}")
    convs = [n for n in gm.graph.nodes if _is_conv2d(n)]
    if choice == "as_traced":
        return LayoutDecision(False, "conv_layout='as_traced'", len(convs))
    if not convs:
        return LayoutDecision(False, "no 2-d convolution")
    if choice == "auto" and not on_cpu_inference:
        return LayoutDecision(False, "channels-last runs only on request (conv_layout='channels_last') on the GPU "
                              "and in training: it measured slower than the traced layout on the H200, and a "
                              "training graph would copy every saved activation back to the traced layout",
                              len(convs))
    try:
        conversions = _rewrite(gm, convs, convert_weights=on_cpu or on_cpu_inference)
    except _Unchanged as exc:
        return LayoutDecision(False, str(exc), len(convs))
    if choice == "auto":
        return LayoutDecision(True, "auto: channels-last on the CPU, where oneDNN runs NHWC convolutions without "
                              "reordering each input (as Inductor chooses)", len(convs), conversions)
    return LayoutDecision(True, "conv_layout='channels_last'", len(convs), conversions)


def _is_conv2d(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not aten.convolution.default:
        return False
    x = _val(node.args[0])
    transposed = node.args[6] if len(node.args) > 6 else False
    return isinstance(x, torch.Tensor) and x.dim() == 4 and not transposed


def _val(arg: Any) -> Any:
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg


class _Unchanged(Exception):
    """The rewrite was undone; the message says why."""


def _rewrite(gm: torch.fx.GraphModule, convs: list[torch.fx.Node], convert_weights: bool = False) -> tuple[str, ...]:
    graph = gm.graph
    saved = {n: dict(n.meta) for n in graph.nodes}
    inserted: list[torch.fx.Node] = []
    try:
        _propagate(gm, set(convs), inserted, convert_weights)
        _restore_output_layouts(gm, saved, inserted)
    except Exception as exc:  # noqa: BLE001 - any failure leaves the graph as traced
        for clone in reversed(inserted):
            clone.replace_all_uses_with(clone.args[0])
            graph.erase_node(clone)
        for n, meta in saved.items():
            n.meta = meta
        raise _Unchanged(f"kept as traced: channels-last propagation failed ({type(exc).__name__}: {exc})") \
            from exc
    graph.lint()
    gm.recompile()
    return tuple(n.name for n in inserted)


def _propagate(gm: torch.fx.GraphModule, convs: set[torch.fx.Node], inserted: list[torch.fx.Node],
               convert_weights: bool = False) -> None:
    """Recompute every node's fake value in graph order, inserting a channels-last clone in front of
    each convolution whose input (as now computed) is not channels-last; with `convert_weights`, of
    each weight likewise."""
    fake_mode = _fake_mode(gm)
    values: dict[torch.fx.Node, Any] = {}
    with fake_mode:
        for node in list(gm.graph.nodes):
            if node.op == "placeholder":
                values[node] = node.meta.get("val")
                continue
            if node.op == "get_attr":  # a constant: its fake value as recorded, or made from the tensor
                value = node.meta.get("val")
                attr = getattr(gm, node.target)
                values[node] = value if value is not None or not isinstance(attr, torch.Tensor) \
                    else fake_mode.from_tensor(attr)
                continue
            if node.op == "output":
                continue
            if node in convs and not _channels_last(values[node.args[0]]):
                _convert_input(gm, node, torch.channels_last, "to_channels_last", values, inserted)
            if node in convs and convert_weights and not _channels_last(values[node.args[1]]):
                _convert_input(gm, node, torch.channels_last, "weight_to_channels_last", values, inserted,
                               position=1)
            try:
                values[node] = _run(node, values)
            except (RuntimeError, ValueError):  # fake tensors raise ValueError for an impossible view
                if node.target not in VIEWS:
                    raise
                # A view traced for NCHW that channels-last strides cannot express (flattening a
                # feature map): it reads a contiguous copy, as reshape would.
                _convert_input(gm, node, torch.contiguous_format, "to_contiguous", values, inserted)
                values[node] = _run(node, values)
            node.meta["val"] = values[node]


def _convert_input(gm: torch.fx.GraphModule, node: torch.fx.Node, memory_format: torch.memory_format, name: str,
                   values: dict, inserted: list[torch.fx.Node], position: int = 0) -> None:
    """Put `clone(node.args[position], memory_format=...)` in front of `node` and make `node` read it."""
    source = node.args[position]
    with gm.graph.inserting_before(node):
        clone = _clone_node(gm, source, memory_format, f"{name}_{len(inserted)}")
    inserted.append(clone)
    values[clone] = _run(clone, values)
    clone.meta["val"] = values[clone]
    node.args = node.args[:position] + (clone,) + node.args[position + 1:]


def _clone_node(gm: torch.fx.GraphModule, source: torch.fx.Node, memory_format: torch.memory_format,
                name: str) -> torch.fx.Node:
    """A clone node named through the graph's namespace, which keeps the name unique (a suffix is
    added if the graph already has a node of that name)."""
    return gm.graph.create_node("call_function", aten.clone.default, (source,), {"memory_format": memory_format},
                                name=name)


def _run(node: torch.fx.Node, values: dict) -> Any:
    if node.op != "call_function":
        raise RuntimeError(f"{node.op} node {node.name}")
    args = map_arg(node.args, lambda n: values[n])
    kwargs = map_arg(node.kwargs, lambda n: values[n])
    return node.target(*args, **kwargs)


def _channels_last(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_contiguous(memory_format=torch.channels_last)


def _restore_output_layouts(gm: torch.fx.GraphModule, saved: dict, inserted: list[torch.fx.Node]) -> None:
    """Each graph output gets the strides it was traced with: a contiguous copy where channels-last
    reached it (other changed layouts are not handled: the rewrite is undone)."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    for arg in output.all_input_nodes:
        before, now = saved[arg].get("val"), arg.meta.get("val")
        if not isinstance(before, torch.Tensor) or tuple(now.stride()) == tuple(before.stride()):
            continue
        if not before.is_contiguous():
            raise RuntimeError(f"output {arg.name} was traced with strides {tuple(before.stride())}")
        with gm.graph.inserting_before(output):
            back = _clone_node(gm, arg, torch.contiguous_format, f"to_traced_layout_{len(inserted)}")
        with _fake_mode(gm):
            back.meta["val"] = aten.clone.default(now, memory_format=torch.contiguous_format)
        if tuple(back.meta["val"].stride()) != tuple(before.stride()):
            raise RuntimeError(f"output {arg.name}'s traced strides {tuple(before.stride())} are not restored "
                               "by a contiguous copy")
        inserted.append(back)
        output.replace_input_with(arg, back)


def _fake_mode(gm: torch.fx.GraphModule) -> Any:
    mode = _compat.fake_mode_of(gm)
    if mode is None:
        raise RuntimeError("the graph carries no fake values")
    return mode
