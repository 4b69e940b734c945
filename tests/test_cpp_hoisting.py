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
