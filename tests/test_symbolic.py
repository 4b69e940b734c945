"""Symbolic kernels (compiler_core/ir/symbolic.py): a graph Dynamo captures with symbolic sizes is
compiled once, its kernels take the sizes as arguments, and every size it then serves matches eager."""

from __future__ import annotations

import copy
import math
import re
from html import unescape

import pytest
import torch

import compiler_core as cc
from compiler_core.ir import symbolic
from compiler_core.schedule import plan_passes


def _layer_norm_gelu(hidden: int):
    norm = torch.nn.LayerNorm(hidden)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return lambda x: torch.nn.functional.gelu(norm(x)) * 2


def _strided_conv_then_layer_norm():
    # wav2vec2's feature extractor: torch gives the conv output's strides as Max(1, s//5 - 1), a size
    # our printers resolve to a sum; read as a stride it must print in parentheses
    conv, norm = torch.nn.Conv1d(1, 8, 10, stride=5, bias=False), torch.nn.LayerNorm(8)
    return lambda x: torch.nn.functional.gelu(norm(conv(x).transpose(1, 2)).transpose(1, 2))


def _group_norm_then_variance():
    norm = torch.nn.GroupNorm(2, 4)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return lambda x: norm(x) + torch.var(x, dim=-1, keepdim=True) + x.var(dim=(0, 2), correction=0)[:, None]


FUNCTIONS = {
    # (function, input shapes one graph serves)
    "pointwise": (lambda x: torch.tanh(x) * 2 + 1, [(5, 8), (7, 8), (9, 3), (1, 1)]),
    "softmax_over_a_symbolic_row": (lambda x: torch.softmax(x, -1) + x.sum(-1, keepdim=True),
                                     [(5, 8), (7, 8), (9, 13), (3, 300)]),
    "layer_norm_over_symbolic_rows": (_layer_norm_gelu(32), [(2, 5, 32), (3, 7, 32), (4, 9, 32), (2, 2, 32)]),
    "transposed_input": (lambda x: (x.t() * 3).exp(), [(4, 6), (6, 4), (5, 9)]),
    # sizes that multiply a symbol by itself (s1*s1): printed as products, never sympy's s1**2
    "outer_product": (lambda x: (x[:, :, None] * x[:, None, :]).exp().sum(0), [(3, 5), (4, 7), (2, 3)]),
    # a pad that is an expression with modulo (an attention mask padded to a multiple of 8 on the GPU)
    "pad_to_a_multiple_of_8": (lambda x: torch.nn.functional.pad(x, (0, (8 - x.shape[-1] % 8) % 8), value=-1.0) * 2,
                               [(3, 5), (4, 11), (2, 16), (5, 9)]),
    "strided_conv_then_layer_norm": (_strided_conv_then_layer_norm(), [(2, 1, 130), (3, 1, 97), (2, 1, 201)]),
    "sizes_as_values": (lambda x: torch.relu(x) * x.shape[0] + x.mean(-1, keepdim=True), [(3, 4), (5, 7), (6, 2)]),
    # a variance's count is a size: divided by in the kernel, never a float literal of the first call's
    # count (HuBERT's group norm over the audio length compiled again for each length)
    "variance_and_group_norm_over_a_symbolic_length": (
        _group_norm_then_variance(), [(2, 4, 9), (3, 4, 17), (2, 4, 30)]),
    # torch's CeilToInt(IntTrueDiv(...)) in a size (MobileViT's `math.ceil(h / patch)`)
    "ceil_of_a_size_quotient": (lambda x: torch.nn.functional.pad(
        x, (0, math.ceil(x.shape[-1] / 4) * 4 - x.shape[-1]), value=0.5).exp(), [(3, 5), (4, 11), (2, 16), (5, 9)]),
}


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_one_compilation_serves_every_size_and_matches_eager(backend, name):
    fn, shapes = FUNCTIONS[name]
    compiled = cc.compile(fn, backend=backend, dynamic=True)
    first = None
    for shape in shapes:
        x = torch.randn(*shape)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-5, atol=1e-5)
        session = compiled.session
        first = first or session
        if min(shape) > 1:  # Dynamo specializes sizes 0 and 1: those compile a static graph
            assert session is first, f"{shape} compiled again: {session.messages}"
    record = first.graphs[0]
    assert record.symbolic and not record.fell_back, first.messages
    assert all(k.size_args for k in record.kernels), "each kernel takes the sizes as arguments"
    for k in record.kernels:
        assert all(s in k.source for s in k.size_args)
    assert record.sizes.startswith("s") and "=" in record.sizes, "the example call's sizes"


def test_the_default_is_static_until_a_size_changes_and_each_compile_starts_static():
    """dynamic=None, as torch.compile: the first size compiles with numbers, a second one symbolic, and
    that graph serves a third size. Dynamo remembers changed sizes per function across compilations;
    a new compile() of the same function must not inherit them (a re-run notebook cell)."""
    def f(x):
        return torch.softmax(x * 2, -1) + 1

    for _ in range(2):
        compiled = cc.compile(f, backend="cpp")
        first = torch.randn(4, 16)
        torch.testing.assert_close(compiled(first), f(first))
        assert not compiled.session.graphs[0].symbolic
        for rows in (5, 9):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(compiled(x), f(x))
            assert compiled.session.graphs[0].symbolic
        assert len(compiled.session.recompiles) <= 1 and compiled.session.stats["fallback_graphs"] == 0


def test_the_kernels_and_host_program_print_the_symbols():
    compiled = cc.compile(lambda x: torch.softmax(x, -1), backend="cpp", dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(4, 8))
    record = compiled.session.graphs[0]
    (kernel,) = record.kernels
    rows, row = kernel.size_args[::-1] if len(kernel.size_args) == 2 else (None, None)
    assert f"int64_t {kernel.size_args[0]}" in kernel.source
    assert f"x0 < {rows}" in kernel.source and f"r0 < {row}" in kernel.source
    host = record.wrapper.source
    assert f"{rows} = v_" in host and f"{row} = v_" in host, "the host reads each size at every call"
    assert f"alloc(({rows}, {row}), ({row}, 1)" in host


def test_a_size_decision_is_a_guard_and_a_call_past_it_compiles_again(monkeypatch):
    # The index width is decided on the example sizes and kept as a guard: with the int32 limit made
    # small, a call whose offsets pass it must recompile (and index in int64), never reuse the kernel.
    monkeypatch.setattr(plan_passes, "INT32_MAX", 4000)
    monkeypatch.setattr(plan_passes, "COUNTER_HEADROOM", 0)
    fn = lambda x: torch.sigmoid(x) + 1  # noqa: E731
    compiled = cc.compile(fn, backend="cpp", dynamic=True)
    for rows in (10, 20):
        x = torch.randn(rows, 100)
        torch.testing.assert_close(compiled(x), fn(x))
    small = compiled.session
    assert any("4000" in g for g in small.graphs[0].size_guards), small.graphs[0].size_guards
    assert "index: int32" in small.graphs[0].kernels[0].source
    x = torch.randn(50, 100)  # 5000 elements: past the guard
    torch.testing.assert_close(compiled(x), fn(x))
    large = compiled.session
    assert large is not small and large.recompiles, "Dynamo checked our guard and compiled again"
    assert "index: int64" in large.graphs[0].kernels[0].source


def test_index_width_keeps_only_the_graphs_largest_bounds_as_guards(monkeypatch):
    # Every kernel asks whether its offsets fit in int32; the graph keeps one guard per bound no other
    # one covers (here the largest buffer's), not one per kernel. int64 is right at any size: it needs
    # no guard, so a smaller call later reuses the int64 compilation instead of compiling again.
    monkeypatch.setattr(plan_passes, "INT32_MAX", 4000)
    monkeypatch.setattr(plan_passes, "COUNTER_HEADROOM", 0)

    def fn(x):
        a = torch.sigmoid(x) + 1
        rows = a.sum(-1, keepdim=True)
        return (a * rows).softmax(-1) + x[:, :7].exp().sum(-1, keepdim=True), torch.tanh(rows / 100)

    compiled = cc.compile(fn, backend="cpp", dynamic=True)
    for rows in (10, 20):
        x = torch.randn(rows, 100)
        torch.testing.assert_close(compiled(x), fn(x))
    small = compiled.session
    record = small.graphs[0]
    assert len(record.kernels) >= 2 and all("index: int32" in k.source for k in record.kernels)
    width_guards = [g for g in record.size_guards if "4000" in g]
    assert len(width_guards) == 1, record.size_guards
    x = torch.randn(50, 100)  # 5000 elements: past the guard
    torch.testing.assert_close(compiled(x), fn(x))
    large = compiled.session
    assert large is not small and "index: int64" in large.graphs[0].kernels[0].source
    assert not [g for g in large.graphs[0].size_guards if "4000" in g], large.graphs[0].size_guards
    x = torch.randn(30, 100)  # fits int32, and the int64 compilation serves it too
    torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.session is large


def test_a_stage_that_cannot_take_symbols_compiles_per_size_and_says_why(monkeypatch):
    # A stage meeting a symbolic size it does not handle raises NotSymbolic (or fails on a sympy
    # comparison); the graph is then compiled for each concrete size, never run in eager PyTorch.
    from compiler_core import api

    real = api.plan_memory

    def not_ready(graph, *args, **kwargs):
        if graph.size_bindings:
            raise symbolic.NotSymbolic("the memory planner was asked to refuse symbolic sizes")
        return real(graph, *args, **kwargs)

    monkeypatch.setattr(api, "plan_memory", not_ready)
    fn = lambda x: torch.relu(x) + 1  # noqa: E731
    compiled = cc.compile(fn, backend="cpp", dynamic=True)
    sessions = []
    for rows in (3, 5):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), fn(x))
        assert compiled.session.stats["fallback_graphs"] == 0
        sessions.append(compiled.session)
    assert any("cannot take yet" in m and "memory planner" in m for m in sessions[0].messages), sessions[0].messages
    assert not any(g.symbolic for s in sessions for g in s.graphs)
    assert sessions[1] is not sessions[0], "the second size compiled on its own"


def test_symbolic_kernels_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(symbolic, "ENABLED", False)
    compiled = cc.compile(lambda x: torch.tanh(x), backend="cpp", dynamic=True)
    compiled(torch.randn(3, 4))
    assert not compiled.session.graphs[0].symbolic and compiled.session.graphs[0].sizes


# Text models of the zoo, inference with random weights: one symbolic compilation serves every
# (batch, sequence) pair. BART's own code makes Dynamo specialize the batch size, so Dynamo compiles
# it again for each new batch (its guards, not ours); each of those compilations is symbolic too.
TEXT_MODELS = ["gpt2", "llama", "qwen2", "mistral", "gpt_neox", "falcon", "bert", "roberta", "distilbert",
               "t5", "bart"]
DYNAMO_SPECIALIZES_BATCH = {"bart"}


@pytest.mark.zoo
@pytest.mark.slow
@pytest.mark.parametrize("name", TEXT_MODELS)
def test_zoo_text_models_run_symbolic_kernels_at_every_batch_and_length(name):
    from tests.models.zoo import ZOO, text_inputs_at

    case = ZOO[name].build("small", "cpu", torch.float32, mask=True)
    model = case.model.eval()
    compiled = cc.compile(model, dynamic=True)
    gen = torch.Generator().manual_seed(0)
    sessions = []
    for batch, seq in ((2, 6), (3, 11), (2, 9), (4, 7)):
        inputs = text_inputs_at(case.inputs, batch, seq, 97, gen, encoder_decoder=model.config.is_encoder_decoder)
        with torch.no_grad():
            ours, eager = compiled(**inputs), model(**inputs)
        compared = [f for f in ("logits", "last_hidden_state") if getattr(eager, f, None) is not None]
        assert compared, f"{name}: no output to compare"
        for field in compared:
            torch.testing.assert_close(getattr(ours, field), getattr(eager, field), rtol=1e-4, atol=1e-4)
        session = compiled.session
        assert session.stats["fallback_graphs"] == 0, session.messages
        assert all(g.symbolic for g in session.graphs), session.messages
        if session not in sessions:
            sessions.append(session)
    if name not in DYNAMO_SPECIALIZES_BATCH:
        assert len(sessions) == 1, [s.recompiles for s in sessions]


@pytest.mark.zoo
@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "bert", "t5"])
def test_zoo_training_steps_compile_forward_and_backward_once_for_every_size(name):
    from tests.models.zoo import ZOO, text_inputs_at

    case = ZOO[name].build("small", "cpu", torch.float32, mask=True)
    model = case.model.train(True)
    reference = copy.deepcopy(model)
    compiled = cc.compile(model, dynamic=True)
    gen = torch.Generator().manual_seed(0)
    sessions = []
    for batch, seq in ((2, 6), (3, 11), (2, 9)):
        inputs = text_inputs_at(case.inputs, batch, seq, 97, gen, encoder_decoder=model.config.is_encoder_decoder)
        inputs["labels"] = inputs["decoder_input_ids" if model.config.is_encoder_decoder else "input_ids"].clone()
        compiled(**inputs).loss.backward()
        reference(**inputs).loss.backward()
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            if theirs.grad is not None:
                torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-5)
            ours.grad = theirs.grad = None
        session = compiled.session
        assert session.stats["fallback_graphs"] == 0, session.messages
        if session not in sessions:
            sessions.append(session)
    assert len(sessions) == 1, [s.recompiles for s in sessions]
    assert all(g.symbolic and g.backward is not None and g.backward.symbolic for g in sessions[0].graphs), \
        sessions[0].messages


# Vision and audio models of the zoo with dynamic=True: every input size is symbolic (image sides,
# audio length), so conv, pooling and patching arithmetic reach the kernels as FloorDiv, Max and
# modulo expressions (Swin: its batch only, BATCH_ONLY says why). Where the model takes any
# size (convolutional ones, audio of any length), the image sides or the clip length change too, not
# only the batch; ViT, Swin and the Whisper encoder take one input size. HuBERT (tests/models/beyond.py)
# is here for its group norm over the clip length: a variance whose count is a size.
VISION_AND_AUDIO = ["resnet", "convnext", "segformer", "vit", "wav2vec2", "whisper_encoder", "swin", "hubert_ctc"]
ANY_INPUT_SIZE = {"resnet", "convnext", "segformer", "wav2vec2", "hubert_ctc"}
# Swin with dynamic=True (every size symbolic, its window partition over symbolic image sides) took
# 75-90 s of the suite's 30 minutes, two thirds of it in torch's own Dynamo tracing (50 s with
# backend="eager"; 2026-12-05): here only its batch, the size that changes, is marked dynamic.
BATCH_ONLY = {"swin"}


@pytest.mark.zoo
@pytest.mark.slow
@pytest.mark.parametrize("name", VISION_AND_AUDIO)
def test_zoo_vision_and_audio_models_serve_every_size_from_one_compilation(name):
    from tests.models.beyond import BEYOND
    from tests.models.zoo import ZOO

    case = {**ZOO, **BEYOND}[name].build("small", "cpu", torch.float32, mask=False)
    model = case.model.eval()
    key, example = next((k, v) for k, v in case.inputs.items() if isinstance(v, torch.Tensor) and v.is_floating_point())
    compiled = cc.compile(model, dynamic=None if name in BATCH_ONLY else True)
    sessions = []
    for batch, grow in ((2, 0), (3, 16), (5, 48)):
        shape = [batch, *example.shape[1:]]
        if name in ANY_INPUT_SIZE:  # images grow on both sides, audio in length
            for d in ((2, 3) if example.dim() == 4 else (-1,)):
                shape[d] += grow if example.dim() == 4 else 10 * grow
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(batch))
        if name in BATCH_ONLY:
            torch._dynamo.mark_dynamic(x, 0)
        with torch.no_grad():
            ours, eager = compiled(**{key: x}), model(**{key: x})
        field = next(f for f in ("logits", "last_hidden_state") if getattr(eager, f, None) is not None)
        torch.testing.assert_close(getattr(ours, field), getattr(eager, field), rtol=1e-4, atol=1e-4)
        assert compiled.session.stats["fallback_graphs"] == 0, compiled.session.messages
        if compiled.session not in sessions:
            sessions.append(compiled.session)
    assert all(g.symbolic for g in sessions[0].graphs), sessions[0].messages
    assert len(sessions) == 1, [s.recompiles for s in sessions]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gpt2_on_the_gpu_compiles_once_for_every_size(dtype):
    # The zoo's realistic GPT-2 width on the GPU (Triton kernels taking the sizes as arguments), judged
    # against an fp64 reference: ours within the dtype's allowance or within twice eager's own error.
    from tests.models.zoo import ZOO, text_inputs_at

    case = ZOO["gpt2"].build("large", "cuda", dtype, mask=True)
    model = case.model.eval()
    reference = ZOO["gpt2"].build("large", "cuda", torch.float64, mask=True).model.eval()
    compiled = cc.compile(model, dynamic=True)
    gen = torch.Generator().manual_seed(0)
    rtol, atol = {torch.float32: (1e-4, 1e-5), torch.bfloat16: (3e-2, 1e-3)}[dtype]
    sessions = []
    for batch, seq in ((4, 128), (8, 200), (2, 333)):
        drawn = text_inputs_at(case.inputs, batch, seq, 1000, gen, encoder_decoder=False)
        inputs = {k: v.cuda() for k, v in drawn.items()}
        with torch.no_grad():
            ours, eager, exact = compiled(**inputs).logits, model(**inputs).logits, reference(**inputs).logits
        ours_err = (ours.double() - exact).abs().max().item()
        eager_err = (eager.double() - exact).abs().max().item()
        assert ours_err <= max(atol + rtol * exact.abs().max().item(), 2 * eager_err), (batch, seq, ours_err, eager_err)
        session = compiled.session
        assert session.stats["fallback_graphs"] == 0 and all(g.symbolic for g in session.graphs), session.messages
        if session not in sessions:
            sessions.append(session)
    assert len(sessions) == 1, [s.recompiles for s in sessions]
    kernels = sessions[0].graphs[0].kernels
    assert kernels and all(k.backend == "triton" and k.size_args for k in kernels)


def test_the_explorer_renders_every_view_of_a_symbolic_compilation(tmp_path):
    # Every view reads sizes (bytes moved, the memory plan, kernels, the roofline): with symbols they
    # show the first call's figures and the kernels' symbolic source, and none fails on a sympy size.
    from explorer.exploration import gather
    from explorer.view import ExplorerView

    compiled = cc.compile(lambda x: torch.softmax(x, -1) * 2 + x.mean(), backend="cpp", dynamic=True)
    compiled(torch.randn(6, 8))
    session = compiled.session
    record = session.graphs[0]
    assert record.symbolic
    exploration = gather(session, "softmax", None)
    moved = exploration.traffic
    assert type(moved["fused_bytes"]) is int and 0 < moved["fused_bytes"] < moved["eager_bytes"], moved
    html = ExplorerView(exploration).to_html(tmp_path / "report.html").read_text()
    text = " ".join(unescape(re.sub(r"<[^>]+>", "", html)).split())  # the page as read, highlighting gone
    kernel = record.kernels[0]
    assert f"int64_t {kernel.size_args[0]}" in text, "the kernels' symbolic source"
    assert "our kernels take the sizes as arguments" in text and record.sizes in text


@torch.library.custom_op("fcompile_symbolic_test::doubled_with_length", mutates_args=())
def _doubled_with_length(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    return x * 2, x.shape[0]


@_doubled_with_length.register_fake
def _(x):
    return torch.empty_like(x), x.shape[0]


def test_an_extern_that_returns_a_size_gives_its_expression():
    # cuDNN attention returns its sequence lengths (max_q, max_k) as ints: with symbolic sizes they are
    # SymInts, and a later use must get the size expression the host program computes
    def fn(x):
        doubled, length = torch.ops.fcompile_symbolic_test.doubled_with_length(x)
        return torch.relu(doubled) * length + 1

    compiled = cc.compile(fn, backend="cpp", dynamic=True)
    for rows in (3, 5, 9):
        x = torch.randn(rows, 4)
        torch.testing.assert_close(compiled(x), fn(x))
    session = compiled.session
    assert session.graphs[0].symbolic and not session.recompiles, session.messages


@torch.library.custom_op("fcompile_symbolic_test::scaled_by_length", mutates_args=())
def _scaled_by_length(x: torch.Tensor, length: int) -> torch.Tensor:
    return x * length


@_scaled_by_length.register_fake
def _(x, length):
    return torch.empty_like(x)


def _scaled_by_length_backward(ctx, grad):
    # the saved length reaches the backward graph as a size input, and goes to an extern call there too
    return torch.ops.fcompile_symbolic_test.scaled_by_length(grad, ctx.length), None


def _keep_length(ctx, inputs, output):
    ctx.length = inputs[1]


_scaled_by_length.register_autograd(_scaled_by_length_backward, setup_context=_keep_length)


def test_an_extern_that_takes_a_size_gets_its_expression_in_forward_and_backward():
    # cuDNN attention's backward takes the forward's max_q/max_k: with symbolic sizes they are sizes
    # (computed from an input's shape in the forward, a saved size input in the backward), passed to an extern
    # call as the expression the host program computes. BERT's bf16 training step on the H200 was
    # compiled per size because the lowering took only tensors and numbers as extern arguments.
    def fn(x):
        return torch.ops.fcompile_symbolic_test.scaled_by_length(torch.tanh(x) * 2, x.shape[0]) + 1

    compiled = cc.compile(fn, backend="cpp", dynamic=True)
    sessions = []
    for rows in (3, 5, 9):
        x = torch.randn(rows, 4, requires_grad=True)
        ours = compiled(x)
        (ours_grad,) = torch.autograd.grad(ours.sum(), x)
        eager = fn(x)
        (eager_grad,) = torch.autograd.grad(eager.sum(), x)
        torch.testing.assert_close(ours, eager)
        torch.testing.assert_close(ours_grad, eager_grad)
        if compiled.session not in sessions:
            sessions.append(compiled.session)
    session = sessions[0]
    assert len(sessions) == 1, [s.messages for s in sessions]
    (record,) = session.graphs
    assert record.symbolic and record.backward is not None and record.backward.symbolic, session.messages
    assert any("scaled_by_length" in k for k in record.backward.wrapper.source.split("\n")), "an extern call"


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_training_step_compiles_forward_and_backward_once_for_every_size(backend, tmp_path):
    # AOTAutograd compiles the backward with the forward (its size decisions become Dynamo's guards
    # before the first call returns); our partitioner splits the symbolic joint graph.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4))
    reference = copy.deepcopy(model)
    compiled = cc.compile(model, backend=backend, dynamic=True)
    sessions = []
    for rows in (5, 9, 13):
        x = torch.randn(rows, 16)
        compiled(x[:, None].expand(rows, 3, 16)).square().sum().backward()
        reference(x[:, None].expand(rows, 3, 16)).square().sum().backward()
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-5)
            ours.grad, theirs.grad = None, None
        if compiled.session not in sessions:
            sessions.append(compiled.session)
    assert len(sessions) == 1, [s.recompiles for s in sessions]
    (record,) = sessions[0].graphs
    assert record.symbolic and record.backward is not None and record.backward.symbolic, sessions[0].messages
    assert record.partition is not None and all(k.size_args for k in record.backward.kernels)
    # the joint graph, the partition's saved bytes and the backward's kernels render with symbols
    from explorer.exploration import gather
    from explorer.view import ExplorerView

    html = ExplorerView(gather(sessions[0], "mlp", None)).to_html(tmp_path / "report.html").read_text()
    assert record.backward.kernels[0].name in html


def _conv_bn_relu():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 4, 3, stride=2), torch.nn.BatchNorm2d(4), torch.nn.GELU())


def test_batch_norm_training_is_symbolic_and_partitioned_on_the_example_sizes():
    # Batch norm in training: its running variance takes n / (n - 1) over sizes, a float the forward
    # computes from sizes (lowered as a ratio the kernel divides) and may hand the backward. The
    # partitioner must weigh activations at the example call's sizes: on torch 2.13 every symbolic
    # size read as 1 (a renamed hint function), and the partition saved 4-byte "activations".
    model = _conv_bn_relu().train()
    reference = copy.deepcopy(model)
    compiled = cc.compile(model, backend="cpp", dynamic=True)
    sessions = []
    for batch, side in ((2, 9), (3, 12), (4, 7)):
        x = torch.randn(batch, 3, side, side)
        compiled(x).square().sum().backward()
        reference(x).square().sum().backward()
        for ours, theirs in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-4)
            ours.grad, theirs.grad = None, None
        for ours, theirs in zip(model.buffers(), reference.buffers()):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        if compiled.session not in sessions:
            sessions.append(compiled.session)
    assert len(sessions) == 1, [s.recompiles for s in sessions]
    (record,) = sessions[0].graphs
    assert record.symbolic and record.backward is not None and record.backward.symbolic, sessions[0].messages
    static = cc.compile(_conv_bn_relu().train(), backend="cpp")
    static(torch.randn(2, 3, 9, 9)).square().sum().backward()
    expected = static.session.graphs[0].partition
    assert sorted(s.bytes for s in record.partition.saved) == sorted(s.bytes for s in expected.saved)
    assert max(s.bytes for s in record.partition.saved) == 2 * 8 * 9 * 9 * 4, "a conv output, at the example sizes"


def test_a_symbolic_scalar_is_never_a_literal_constant():
    # The class behind HuBERT's recompiles: a SymFloat inside a Constant was compared, hashed and printed
    # at its example value, each time a silent specialization. Every such scalar is refused at once.
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from compiler_core.ir.values import Constant

    env = ShapeEnv()
    size = env.create_unbacked_symint()
    for value in (size, size * 1.0, size > 2):
        with pytest.raises(TypeError, match="size expression"):
            Constant(value, torch.float32)
    assert Constant(0.5, torch.float32).value == 0.5


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_size_passed_as_an_int_is_a_symbol_of_unknown_sign_and_still_compiles_once(backend):
    # Hugging Face's causal-LM loss takes `vocab_size` as an int: Dynamo makes it a symbol with no
    # sign assumption, and the logits' last dim becomes that symbol. A Python max/min/comparison on
    # such a size cannot be answered by sympy; the Triton printer asked one (max(rnumel, 1)) and GPT-2
    # training compiled its loss graph once per size on the H200. Forward and backward, both backends.
    def loss(logits, labels, vocab):
        return torch.nn.functional.cross_entropy(logits.view(-1, vocab), labels.view(-1), ignore_index=-100)

    compiled = cc.compile(loss, backend=backend, dynamic=True)
    sessions = []
    for batch, seq, vocab in ((2, 5, 7), (3, 4, 9), (2, 6, 11)):
        logits = torch.randn(batch, seq, vocab, requires_grad=True)
        labels = torch.randint(0, vocab, (batch, seq))
        labels[0, -1] = -100
        ours = compiled(logits, labels, vocab)
        (ours_grad,) = torch.autograd.grad(ours, logits)
        eager = loss(logits, labels, vocab)
        (eager_grad,) = torch.autograd.grad(eager, logits)
        torch.testing.assert_close(ours, eager, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ours_grad, eager_grad, rtol=1e-5, atol=1e-6)
        if compiled.session not in sessions:
            sessions.append(compiled.session)
    session = sessions[0]
    assert not any("cannot take yet" in m for m in session.messages), session.messages
    assert all(g.symbolic and g.backward is not None and g.backward.symbolic for g in session.graphs), session.messages
    assert len(sessions) == 1, [s.recompiles for s in sessions]


def test_a_pointwise_producer_padded_by_symbolic_amounts_matches_eager():
    """F.pad's amounts as arguments that change between calls: under dynamic=None Dynamo makes the
    changed ones symbols and keeps x's sizes static; the padded producer `sigmoid(x * s + 1)` is then
    computed inside the pad's loop at the producer's element, found by inverting its layout."""
    torch._dynamo.reset()
    x, s = torch.randn(3, 4, 7, 9, generator=torch.Generator().manual_seed(1)), torch.randn(4, 1, 1)

    def f(x, s, left, right, top, bottom):
        return torch.nn.functional.pad(torch.sigmoid(x * s + 1), (left, right, top, bottom), value=-0.5).exp() + 1

    compiled = cc.compile(f, backend="cpp", dynamic=None)
    for pads in [(1, 2, 3, 0), (2, 2, 2, 2), (0, 2, 1, 1)]:
        torch.testing.assert_close(compiled(x, s, *pads), f(x, s, *pads))
    assert compiled.session.graphs[0].symbolic  # the pads that changed are symbols
