"""The C++ kernels vectorise with AVX2 as with AVX-512 (compiler_core/runtime/vectorization.py).

Kernels are built with -march=native, and GCC 12 left loops scalar with AVX2 that it vectorised with
AVX-512: every loop calling our exp, tanh, sigmoid, erf (GELU, SiLU, softmax) had a ternary with a
constant arm ("control flow in loop"), sin and cos converted an int64 to double (AVX2 has no such
instruction): 20 sins of 1,024 floats took 630 us on an AVX2 machine. Compiled for both sets here
(never run), so any machine catches it."""

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc
from compiler_core.runtime.cpp_build import cpp_translation_unit
from compiler_core.runtime.vectorization import (
    ISAS,
    can_compare,
    fused_add_subtracts,
    scalar_only_with,
    vectorized_loop_lines,
)

pytestmark = pytest.mark.skipif(not can_compare(),
                                reason="compiles for x86 vector sets and reads GCC's report: needs x86-64 and GCC")

# What our kernels compute with plain arithmetic (prelude.py): each must vectorise. libm's functions
# (log, pow with a float exponent, atan2...) and int64 <-> float conversions stay scalar by design.
VECTOR_FUNCTIONS = {
    "sin": torch.sin, "cos": torch.cos, "exp": torch.exp, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
    "relu": torch.relu, "clamp": lambda x: x.clamp(-1, 1), "hardswish": F.hardswish, "abs": torch.abs,
    "round": torch.round, "sqrt": lambda x: x.abs().sqrt(), "rsqrt": lambda x: x.abs().rsqrt(),
    "sign": torch.sign, "maximum": lambda x: torch.maximum(x, x.flip(0)),
    "where": lambda x: torch.where(x > 0, x, 2 * x),
    "nan_to_num": torch.nan_to_num, "to_int32": lambda x: (x * 10).int(),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_every_function_of_ours_vectorises_with_avx2_and_avx512(dtype):
    def f(x):
        return tuple(fn(x) for fn in VECTOR_FUNCTIONS.values())

    x = torch.randn(1000, dtype=dtype)
    compiled = cc.compile(f, backend="cpp")
    rtol = 2e-6 if dtype == torch.float32 else 1e-2
    for got, expected in zip(compiled(x), f(x)):
        torch.testing.assert_close(got, expected, equal_nan=True, atol=2e-6, rtol=rtol)
    source = cpp_translation_unit(tuple(compiled.session.kernels))
    for isa, flags in ISAS.items():
        assert vectorized_loop_lines(source, flags), f"no loop vectorised with {isa}"
    assert scalar_only_with(source) == {isa: [] for isa in ISAS}, source[source.index("extern \"C\" void"):]


def test_reductions_vectorise_with_avx2_and_avx512():
    """Row and column sums (the column sums compensated, as a weight gradient's are), max, softmax and
    layer norm: a column sum's compensation step was `isfinite(sum) ? ... : 0`, scalar with AVX2."""
    def f(x, w):
        return (x.sum(0), (x * w).sum(0), x.sum(1), x.amax(1), x.softmax(1),
                F.layer_norm(x, (x.shape[1],), w))

    x, w = torch.randn(256, 192), torch.randn(192)
    compiled = cc.compile(f, backend="cpp")
    for got, expected in zip(compiled(x, w), f(x, w)):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-5)
    for kernel in compiled.session.kernels:
        source = cpp_translation_unit((kernel,))
        assert vectorized_loop_lines(source, ISAS["AVX2"]), kernel.source
        assert scalar_only_with(source) == {isa: [] for isa in ISAS}, kernel.source


def rotary(x, cos, sin):
    """Rotary embedding's half-rotation: a cat along the innermost dimension, each half read under a mask."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_cat_along_the_innermost_dimension_runs_as_unmasked_vector_loops(dtype):
    # One loop over d read `d < 32 ? x[d + 32] : 0`: masked loads, which AVX2 has for 32-bit types only
    # (a bf16 rotary of Llama's size ran scalar, 7x slower than eager). The loop is now cut at 32:
    # each piece vectorises with either set and has no masked load left.
    x, cos, sin = (torch.randn(4, 16, 64, dtype=dtype) for _ in range(3))
    compiled = cc.compile(rotary, backend="cpp")
    torch.testing.assert_close(compiled(x, cos, sin), rotary(x, cos, sin), rtol=0, atol=0)
    (kernel,) = compiled.session.kernels
    assert "x2 = 0; x2 < 32; x2++" in kernel.source and "x2 = 32; x2 < 64; x2++" in kernel.source, kernel.source
    source = cpp_translation_unit((kernel,))
    for isa, flags in ISAS.items():
        assert len(vectorized_loop_lines(source, flags)) >= 2, (isa, kernel.source)


def pair_rotation(x, table):
    """Meta Llama's rotary embedding as real pairs (what its complex product becomes): each feature
    pair (a, b) turns by the table's pair (c, s) to (a * c - b * s, a * s + b * c)."""
    a, b, c, s = x[..., 0::2], x[..., 1::2], table[..., 0::2], table[..., 1::2]
    return torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_rotated_pair_rounds_each_product_and_sum_as_eager_does(dtype):
    # Cut into one-element pieces, the pair loop was unrolled and GCC 12 vectorised the loop around
    # it with vfmaddsub for the alternating - and +, -ffp-contract=off notwithstanding: about 1 value
    # in 6 one rounding off eager's. A pair is now one loop that selects.
    x, table = torch.randn(2, 8, 4, 16, dtype=dtype), torch.randn(8, 1, 16, dtype=dtype)
    compiled = cc.compile(pair_rotation, backend="cpp")
    torch.testing.assert_close(compiled(x, table), pair_rotation(x, table), rtol=0, atol=0)
    for kernel in compiled.session.kernels:
        source = cpp_translation_unit((kernel,))
        for isa, flags in ISAS.items():
            assert fused_add_subtracts(source, flags) == [], (isa, kernel.source)


def cls_token_layer_norm(tokens, cls, pos, w, b):
    """ViT's embedding: a class token put before the patches (a cat along the rows), a position
    embedding added, then layer norm: each row reads one input or the other under a mask that holds
    for the whole row."""
    x = torch.cat((cls.expand(tokens.shape[0], -1, -1), tokens), dim=1) + pos
    return F.layer_norm(x, (x.shape[-1],), w, b)


def test_a_cat_along_the_rows_of_a_bf16_reduction_vectorises_with_avx2():
    # The row loops read `row < 1 ? cls[r] : 0` per element: a masked 16-bit load, which AVX2 lacks
    # (ViT bf16's first layer norm ran scalar). A mask fixed for the row now reads fc::or_zeros.
    dtype = torch.bfloat16
    tokens, cls, pos = (torch.randn(*shape, dtype=dtype) for shape in ((2, 64, 32), (1, 1, 32), (1, 65, 32)))
    w, b = torch.randn(32, dtype=dtype), torch.randn(32, dtype=dtype)
    compiled = cc.compile(cls_token_layer_norm, backend="cpp")
    torch.testing.assert_close(compiled(tokens, cls, pos, w, b), cls_token_layer_norm(tokens, cls, pos, w, b))
    (kernel,) = [k for k in compiled.session.kernels if "omp simd reduction" in k.source]
    assert "fc::or_zeros" in kernel.source, kernel.source
    source = cpp_translation_unit((kernel,))
    assert len(vectorized_loop_lines(source, ISAS["AVX2"])) >= 3, kernel.source
    assert scalar_only_with(source) == {isa: [] for isa in ISAS}, kernel.source


def patch_merging(x, w, b):
    """Swin's patch merging: four strided quarters of the image side by side along the channels (a cat
    along the innermost dimension), then layer norm over it."""
    quarters = (x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2])
    return F.layer_norm(torch.cat(quarters, dim=-1), (4 * x.shape[-1],), w, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_cat_along_the_reduced_dimension_runs_as_unmasked_vector_loops(dtype):
    # The row loops read each quarter under `c < 16`, `16 <= c < 32`...: masked loads in one loop, scalar
    # with AVX2 in bf16 (Swin's patch merging; fp32 too where a linear's bias joins in). Each reduction
    # loop is now cut at 16, 32 and 48.
    x, w, b = torch.randn(2, 8, 8, 16, dtype=dtype), torch.randn(64, dtype=dtype), torch.randn(64, dtype=dtype)
    compiled = cc.compile(patch_merging, backend="cpp")
    torch.testing.assert_close(compiled(x, w, b), patch_merging(x, w, b))
    (kernel,) = [k for k in compiled.session.kernels if "omp simd reduction" in k.source]
    assert "r0 = 16; r0 < 32; r0++" in kernel.source and "r0 = 48; r0 < 64; r0++" in kernel.source, kernel.source
    source = cpp_translation_unit((kernel,))
    assert len(vectorized_loop_lines(source, ISAS["AVX2"])) >= 8, kernel.source
    assert scalar_only_with(source) == {isa: [] for isa in ISAS}, kernel.source


def attention_input(x, w, b):
    """An attention layer's input projection: one linear made into q, k and v by a split. Its backward
    joins the three gradients again (a cat along the columns) and sums them down the rows for the bias."""
    q, k, v = F.linear(x, w, b).split(w.shape[0] // 3, dim=-1)
    return (q * k + v).square().sum()


@pytest.mark.parametrize("width", [128, 96], ids=["block-aligned", "unaligned"])
def test_a_cat_along_the_columns_of_a_column_sum_reads_unmasked(width):
    # The column sum's blocks of 64 columns read the cat's three inputs under `x0 < 128`-style masks, per
    # element and in int64: GPT-block training's qkv-bias gradient took 1.0 ms where Inductor took 0.2
    # (AVX2). Where the cuts fall on block edges (128, 256) each block reads one input, unmasked; where
    # one does not (96) its masks stay per element, and the values are right either way.
    x = torch.randn(256, width)
    w, b = torch.randn(3 * width, width, requires_grad=True), torch.randn(3 * width, requires_grad=True)
    compiled = cc.compile(attention_input, backend="cpp")
    got = torch.autograd.grad(compiled(x, w, b), (w, b))
    want = torch.autograd.grad(attention_input(x, w, b), (w, b))
    for a, e in zip(got, want):  # sums of 256 large products that cancel: within eager's own rounding
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5 * e.abs().max().item())
    (kernel,) = [k for k in compiled.session.kernels if "cat" in k.name and "xb += 64" in k.source]
    masked, unmasked = kernel.source.count("? in_ptr"), kernel.source.count("fc::or_zeros(")
    if width == 96:
        # The cut at 96 lies inside a block (the one at 192 is an edge). With its per-element masked
        # loads the block loop runs scalar with AVX2, as every such loop did before: not fixed.
        assert masked >= 3, kernel.source
        return
    assert masked == 0 and unmasked >= 3, kernel.source
    source = cpp_translation_unit((kernel,))
    assert scalar_only_with(source) == {isa: [] for isa in ISAS}, kernel.source  # AVX2 was scalar
