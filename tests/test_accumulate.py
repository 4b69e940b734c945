"""Matmul accumulation (schedule/accumulate.py): `mm(a, b) + y`, where the add would be a kernel of its
own, becomes `addmm(y, a, b)`, written over `y` when `y` dies there. Each case checks the values
against eager PyTorch with the memory checking mode on (poisoned frees, overlap checks), and that an
input the caller holds is never written over."""

import pytest
import torch

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _externs(record) -> list[str]:
    return [n.extern.target for n in record.loops.nodes if n.kind == "extern"]


def _accumulations(record) -> list[str]:
    return [d.reason for d in record.schedule.decisions if d.reason.startswith("accumulate:")]


def _two_products(a, b, c, d):
    return a @ b + c @ d


@pytest.mark.parametrize("backend", BACKENDS)
def test_sum_of_two_products_is_one_mm_and_one_addmm_written_over_the_first(backend):
    a, b, c, d = torch.randn(64, 32), torch.randn(32, 48), torch.randn(64, 16), torch.randn(16, 48)
    compiled = cc.compile(_two_products, backend=backend, debug="memory")
    torch.testing.assert_close(compiled(a, b, c, d), _two_products(a, b, c, d))
    (record,) = compiled.session.graphs
    assert sorted(_externs(record)) == ["aten.addmm.default", "aten.mm.default"]
    assert not compiled.session.kernels  # no add kernel left
    assert len(_accumulations(record)) == 1
    # The addmm's result lives in the storage of the product it adds (that product dies there).
    (addmm,) = [n for n in record.loops.nodes if n.kind == "extern" and n.extern.target == "aten.addmm.default"]
    assert dict(record.memory.written_over) == {addmm.output.name: addmm.extern.args[0].buffer}
    assert "addmm" in record.wrapper.pretty() and "out=" in record.wrapper.pretty()


def _plus_input(a, b, y):
    return torch.mm(a, b) + y


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_input_addend_is_read_not_overwritten(backend):
    a, b, y = torch.randn(40, 24), torch.randn(24, 56), torch.randn(40, 56)
    kept = y.clone()
    compiled = cc.compile(_plus_input, backend=backend, debug="memory")
    out = compiled(a, b, y)
    torch.testing.assert_close(out, _plus_input(a, b, kept))
    assert torch.equal(y, kept), "the caller's tensor was written over"
    assert out.data_ptr() != y.data_ptr()
    (record,) = compiled.session.graphs
    assert _externs(record) == ["aten.addmm.default"] and not record.memory.written_over


def _plus_then_relu(a, b, y):
    return torch.relu(a @ b + y)


def _square_plus_factor(a):
    return a @ a + a


def _plus_broadcast(a, b, row):
    return a @ b + row


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, shapes", [
    (_plus_then_relu, ((32, 16), (16, 24), (32, 24))),  # the add shares a kernel with the relu
    (_square_plus_factor, ((24, 24),)),  # the addend is a factor of the product
    (_plus_broadcast, ((32, 16), (16, 24), (24,))),  # a broadcast addend is a bias: epilogues' business
], ids=["shares-a-kernel", "addend-is-a-factor", "broadcast-addend"])
def test_adds_that_are_not_folded_still_match(backend, fn, shapes):
    args = [torch.randn(s) for s in shapes]
    compiled = cc.compile(fn, backend=backend, debug="memory")
    torch.testing.assert_close(compiled(*args), fn(*args))
    (record,) = compiled.session.graphs
    assert not _accumulations(record)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bf16_sum_of_products_matches_eager(backend):
    gen = torch.Generator().manual_seed(0)
    a, b, c, d = (torch.randn(s, generator=gen).bfloat16() for s in ((64, 32), (32, 48), (64, 16), (16, 48)))
    compiled = cc.compile(_two_products, backend=backend, debug="memory")
    got = compiled(a, b, c, d)
    exact = _two_products(*(t.double() for t in (a, b, c, d)))
    # The library adds in fp32 and rounds once, where eager rounds the first product and then the sum:
    # roundings at other places, so compare distances from the exact sum, not bits (rms and worst).
    ours, eager = got.double() - exact, _two_products(a, b, c, d).double() - exact
    assert ours.pow(2).mean().sqrt() <= eager.pow(2).mean().sqrt() * 1.1, "worse than eager on average"
    assert ours.abs().max() <= eager.abs().max() * 1.5, (ours.abs().max(), eager.abs().max())
    assert _accumulations(compiled.session.graphs[0])


class _TiedLM(torch.nn.Module):
    """A language model's two ends with one weight: the embedding's gradient and the head's add up."""

    def __init__(self, vocab: int, width: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.mix = torch.nn.Linear(width, width)

    def forward(self, ids):
        hidden = torch.tanh(self.mix(self.embed(ids)))
        logits = hidden @ self.embed.weight.t()
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tied_embedding_gradient_accumulates_into_one_storage(backend):
    torch.manual_seed(0)
    # A vocabulary large enough that the embedding's gradient is not a dense reduction (that one
    # fuses the add into its own kernel): the head's gradient is then added to it by a lone add.
    model = _TiedLM(1200, 32)
    ids = torch.randint(0, 1200, (4, 12))
    model(ids).backward()
    want = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    compiled = cc.compile(model, backend=backend, debug="memory")
    compiled(ids).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[name], rtol=1e-4, atol=1e-5, msg=name)
    backward = [r for r in compiled.session.all_records() if _accumulations(r)]
    assert backward, "the head's weight gradient and the embedding's were not accumulated in one call"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_accumulation_on_cuda_matches_eager():
    # cuBLAS writes the result over the addend it reads (addmm with out= the addend's storage).
    a, b, c, d = (torch.randn(s, device="cuda") for s in ((256, 128), (128, 192), (256, 64), (64, 192)))
    compiled = cc.compile(_two_products, debug="memory")
    torch.testing.assert_close(compiled(a, b, c, d), _two_products(a, b, c, d), rtol=1e-4, atol=1e-4)
    assert compiled.session.graphs[0].memory.written_over
    torch.manual_seed(0)
    model = _TiedLM(12000, 64).cuda()
    ids = torch.randint(0, 12000, (4, 32), device="cuda")
    model(ids).backward()
    want = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    compiled = cc.compile(model, debug="memory")
    compiled(ids).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, want[name], rtol=1e-3, atol=1e-4, msg=name)
