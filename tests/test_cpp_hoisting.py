"""What does not change along a C++ kernel's innermost loop is computed before it
(codegen/cpp/kernel.py, _hoist_row_invariants): a token id and its range check once per row, not at
each of the row's elements, in reductions (embedding + layer norm) and pointwise kernels alike."""

import pytest
import torch
import torch.nn as nn

import compiler_core as cc


def _simd_loop_bodies(source: str) -> list[str]:
    """The text of each `#pragma omp simd` loop's body."""
    bodies, lines = [], source.splitlines()
    for i, line in enumerate(lines):
        if "#pragma omp simd" not in line:
            continue
        depth, body = 0, []
        for text in lines[i + 1:]:
            depth += text.count("{") - text.count("}")
            body.append(text)
            if depth <= 0:
                break
        bodies.append("\n".join(body))
    return bodies


class _EmbeddingLayerNorm(nn.Module):
    def __init__(self, vocab: int = 100, width: int = 48):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(32, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, ids):
        return self.norm(self.tokens(ids) + self.positions(torch.arange(ids.shape[1])))


def test_embedding_and_layer_norm_check_each_token_once_per_row():
    torch.manual_seed(0)
    model = _EmbeddingLayerNorm().eval()
    ids = torch.randint(0, 100, (3, 20))
    compiled = cc.compile(model, backend="cpp")
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), model(ids))
    (kernel,) = [k for k in compiled.session.kernels if "checked_position" in k.source]
    assert kernel.plan.is_reduction
    loops = _simd_loop_bodies(kernel.source)
    assert len(loops) == 3  # the mean, the variance, the normalised row
    for body in loops:
        assert "checked_position" not in body, body
        assert "in_ptr" in body  # the rows are still read inside the loops
    assert kernel.source.count("fc::checked_position") == 1


def test_a_token_out_of_range_still_raises_eagers_error():
    model = _EmbeddingLayerNorm().eval()
    ids = torch.randint(0, 100, (2, 5))
    ids[1, 3] = 100
    compiled = cc.compile(model, backend="cpp")
    with torch.no_grad(), pytest.raises(IndexError):
        compiled(ids)


def test_a_pointwise_gather_reads_its_row_position_before_the_inner_loop():
    torch.manual_seed(0)
    table = torch.randn(50, 40)

    def scaled_rows(ids, scale):
        return table[ids] * scale[:, :, None]

    ids, scale = torch.randint(-50, 50, (4, 6)), torch.randn(4, 6)
    compiled = cc.compile(scaled_rows, backend="cpp")
    torch.testing.assert_close(compiled(ids, scale), scaled_rows(ids, scale))
    (kernel,) = compiled.session.kernels
    for body in _simd_loop_bodies(kernel.source):
        assert "position" not in body and "in_ptr2" not in body, body  # the position and the scale: per row


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_rows_of_no_elements_read_nothing(backend):
    # Hoisting only where the loop runs: an embedding of width 0 reads no row, whatever the ids say.
    model = nn.Embedding(10, 0)
    ids = torch.randint(0, 10, (3, 4))

    def summed(ids):
        return model(ids).sum(-1) + 1

    compiled = cc.compile(summed, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(ids), summed(ids))


def _rotated_append(cache, new, freqs, position):
    """A DynamicCache step: the new key, rotated by its position's angles, appended to the past keys."""
    angles = freqs * position
    half = new.shape[-1] // 2
    rotated = torch.cat([-new[..., half:], new[..., :half]], dim=-1)
    return torch.cat([cache, new * angles.cos() + rotated * angles.sin()], dim=-2)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "symbolic"])
def test_a_cat_along_an_outer_loop_computes_the_costly_side_only_on_its_rows(dynamic, monkeypatch):
    """A `where` is a blend that computes both sides: the cat of a DynamicCache's past keys with the
    rotated new key computed the rotation's cosine and sine for every row of the cache and kept them
    for the last row (Llama decode on the CPU, every layer, every token). The row's condition does not
    change along the inner loop, so the kernel branches on it once per row, each side's loop with the
    condition folded in; the bits are those of the blended loop's."""
    from compiler_core.codegen.cpp import kernel

    g = torch.Generator().manual_seed(0)
    cache, new = torch.randn(4, 37, 32, generator=g), torch.randn(4, 1, 32, generator=g)
    freqs = torch.rand(32, generator=g)
    position = torch.tensor(37.0)
    compiled = cc.compile(_rotated_append, backend="cpp", dynamic=dynamic)
    got = compiled(cache, new, freqs, position)
    torch.testing.assert_close(got, _rotated_append(cache, new, freqs, position))
    (source,) = [k.source for k in compiled.session.kernels if "cos_f32" in k.source]
    assert "if (" in source and "} else {" in source
    copies = [b for b in _simd_loop_bodies(source) if "cos_f32" not in b]
    assert copies and all("in_ptr" in b and "sin_f32" not in b for b in copies)  # the past rows: a copy

    monkeypatch.setattr(kernel, "_unswitch_condition", lambda values, names: None)
    torch._dynamo.reset()
    blended = cc.compile(_rotated_append, backend="cpp", dynamic=dynamic)
    assert torch.equal(blended(cache, new, freqs, position), got)
    (source,) = [k.source for k in blended.session.kernels if "cos_f32" in k.source]
    assert "} else {" not in source
