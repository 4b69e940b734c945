"""A producer inlined into a masked read (a pad, a pooling window's halo, a cat) is placed with the
mask's bounds (kernel_plan.invert_where_masked): its loads get affine indices, not floor divisions
with carries, and per-channel loads that are in bounds everywhere lose the mask and are read once.
Values must stay eager's, edges included."""

import re

import pytest
import torch
import torch.nn.functional as F

import compiler_core as cc

BACKENDS = ["cpp", "triton"]


def sources(compiled):
    return "\n".join(k.source for k in compiled.session.kernels)


def divisions_in_loads(source: str) -> list[str]:
    """C++ subscripts (`in_ptr0[...]`) holding a division or a modulo. (Triton's offsets always split
    the flat `xindex` into dimensions with // and %, so only the C++ source can show the carries.)"""
    subscripts = re.findall(r"in_ptr\d+\[([^\]]*)\]", source)
    assert subscripts, "no load found: the pattern no longer matches the C++ printer"
    return [i for i in subscripts if "/" in i or "%" in i]


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_norm_relu_max_pool_reads_its_window_at_affine_positions(backend):
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(6).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)

    def f(x):
        return F.max_pool2d(torch.relu(bn(x)), 3, 2, 1)

    x = torch.randn(2, 6, 13, 11)
    compiled = cc.compile(f, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), f(x))
    if backend == "cpp":
        source = sources(compiled)
        assert divisions_in_loads(source) == [], divisions_in_loads(source)
        # The channel's mean is read once for the nine window offsets, not under nine masks.
        assert len(re.findall(r"in_ptr1\[x1\]", source)) == 1, source


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pad", [(1, 2, 3, 0), (2, 2, 2, 2), (-1, 2, 1, -2), (0, 0, 4, 1)])
def test_padded_pointwise_producers_match_eager(pad, backend):
    torch.manual_seed(1)
    x, s = torch.randn(3, 4, 7, 9), torch.randn(4, 1, 1)

    def f(x, s):
        y = F.pad(torch.sigmoid(x * s + 1), pad, value=-0.5)
        return y.exp() + 1

    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x, s), f(x, s))
    assert compiled.session.stats["kernel_count"] == 1
    if backend == "cpp":
        assert divisions_in_loads(sources(compiled)) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_cat_of_pointwise_producers_and_a_padded_flattened_read_match_eager(backend):
    torch.manual_seed(2)
    a, b = torch.randn(2, 3, 5), torch.randn(2, 4, 5)

    def f(a, b):
        joined = torch.cat([a.relu() * 2, torch.tanh(b)], dim=1)
        # The flattened pad reads the producer across rows: the mask bounds the flat position only,
        # so the row/column split needs its division and must still be right.
        flat = F.pad((a + 1).flatten(1), (3, 2))
        return joined.sin(), flat * 3

    compiled = cc.compile(f, backend=backend)
    for got, expected in zip(compiled(a, b), f(a, b)):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_and_inf_outside_the_mask_never_leak_into_the_padding(backend):
    x = torch.tensor([[[[float("nan"), 1.0, float("inf")], [2.0, -float("inf"), 3.0]]]])
    scale = torch.tensor([[[[0.0]]]])

    def f(x, scale):
        # 0 * inf = NaN inside; the pad value must stay 7 wherever the window is outside the input.
        return F.pad(x * scale + x.abs(), (2, 1, 1, 2), value=7.0) - 1

    compiled = cc.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x, scale), f(x, scale), equal_nan=True)


def test_channels_last_pool_of_a_padded_producer_selects_without_branches():
    """A channels-last max-pool over batch norm + ReLU (ResNet's stem): the padding masks depend on the
    outer loops only, and ReLU keeps -0.0 (`x < 0 ? 0 : x`, per lane, once per tap). Printed as
    `c ? a : b` and as loads under `c`, GCC 12 made them selects and masked loads with a scalar mask,
    could not vectorise those, and ran the whole loop scalar (30 us for the zoo's small ResNet stem,
    13 us vectorised); the ReLU ternaries alone made it scalar with AVX2. As integer blends
    (`fc::select`, loads from `fc::or_zeros`) the loop vectorises. Values, padding edges and a NaN
    included, stay eager's."""
    from compiler_core.runtime.cpp_build import cpp_translation_unit
    from compiler_core.runtime.vectorization import ISAS, can_compare, scalar_only_with, vectorized_loop_lines

    torch.manual_seed(3)
    bn = torch.nn.BatchNorm2d(16).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)

    def f(x):
        return F.max_pool2d(torch.relu(bn(x)), 3, 2, 1)

    x = torch.randn(2, 16, 16, 16).contiguous(memory_format=torch.channels_last)
    x[0, 3, 0, 0] = float("nan")  # a corner: every window reading it is at the padding's edge
    x[1, 5, 15, 15] = float("inf")
    compiled = cc.compile(f, backend="cpp")
    with torch.no_grad():
        got, expected = compiled(x), f(x)
    torch.testing.assert_close(got, expected, equal_nan=True)
    assert got.stride() == expected.stride()
    (kernel,) = compiled.session.kernels
    assert "fc::or_zeros(" in kernel.source and "fc::select(" in kernel.source, kernel.source
    # No `c ? a : b` on a condition of the outer loops (defined before the vector loop); the pool's own
    # per-lane choice (a larger value or a NaN takes the place of the best so far) is one.
    outer, inner = kernel.source.split("#pragma omp simd", 1)
    uniform = set(re.findall(r"auto (t\d+) = ", outer))
    assert not uniform & set(re.findall(r"\((t\d+) \? ", inner)), kernel.source
    if can_compare():  # x86-64 and GCC's vectorisation report
        source = cpp_translation_unit((kernel,))  # for both instruction sets, whatever this machine has
        for name, isa in ISAS.items():
            assert vectorized_loop_lines(source, isa), f"scalar with {name}"
        assert scalar_only_with(source) == {name: [] for name in ISAS}


def test_selects_of_every_dtype_and_a_masked_cat_match_eager():
    """`fc::select` blends bits: integers, doubles and bools must come out exact; a cat along the
    innermost dimension keeps its per-lane masked loads (ternaries), one along an outer one reads
    `fc::or_zeros`."""
    torch.manual_seed(4)
    a64, b64 = torch.randn(3, 4, 5, dtype=torch.float64), torch.randn(3, 2, 5, dtype=torch.float64)
    ai, bi = torch.randint(-9, 9, (3, 4, 5)), torch.randint(-9, 9, (3, 2, 5))
    ab, bb = torch.rand(3, 4, 5) > 0.5, torch.rand(3, 2, 5) > 0.5

    def f(a64, b64, ai, bi, ab, bb):
        outer = (torch.cat([a64.exp(), b64 * 2], 1), torch.cat([ai * 3, bi - 1], 1), torch.cat([ab, ~bb], 1))
        inner = torch.cat([a64.sin(), a64[:, :, :2].cos()], 2)
        return (*outer, F.pad(ai + 1, (0, 0, 2, 1), value=-7), inner)

    compiled = cc.compile(f, backend="cpp")
    args = (a64, b64, ai, bi, ab, bb)
    for got, expected in zip(compiled(*args), f(*args)):
        torch.testing.assert_close(got, expected)  # exact for the integers and bools
    assert "fc::select(" in sources(compiled) or "fc::or_zeros(" in sources(compiled)



def rotate(x, cos, sin):
    return x * cos + torch.cat((-x[..., 4:], x[..., :4]), dim=-1) * sin


def grouped_query_rotary(q, k, cos, sin):
    """Llama's rotary embedding of 4 query heads and 2 grouped-query key heads, then repeat_kv: the key's
    half-rotation reads its reshaped view at d + 4 where d < 4, and query head h reads kv head h // 2."""
    batch, seq, _ = k.shape
    q = q.view(batch, seq, 4, 8).transpose(1, 2)
    k = k.view(batch, seq, 2, 8).transpose(1, 2)
    k = rotate(k, cos, sin)[:, :, None].expand(batch, 2, 2, seq, 8).reshape(batch, 4, seq, 8)
    return rotate(q, cos, sin), k


def test_a_rotated_grouped_query_key_keeps_only_the_head_division():
    # Inverted over the whole loop, the half-rotation's read of the reshaped key was divisions and
    # modulos of the vectorised variable (`((x4) % 4)`, `(... + x4) / 192`), which kept GCC from
    # vectorising the loop with AVX2 (no 64-bit vector division). Under the cat's mask the read is
    # affine in it; what divisions remain are of outer loop variables.
    torch.manual_seed(0)
    q, k, cos, sin = torch.randn(2, 12, 32), torch.randn(2, 12, 16), torch.randn(12, 8), torch.randn(12, 8)
    compiled = cc.compile(grouped_query_rotary, backend="cpp")
    torch.testing.assert_close(compiled(q, k, cos, sin), grouped_query_rotary(q, k, cos, sin))
    source = sources(compiled)
    inner = re.findall(r"#pragma omp simd\s+for \(int64_t (x\d+) ", source)
    assert inner, "no vectorised loop found: the pattern no longer matches the C++ printer"
    for subscript in divisions_in_loads(source):
        assert "%" not in subscript, subscript
        for divided in re.findall(r"\(\(([^()]*(?:\([^()]*\)[^()]*)*)\) / \d+\)", subscript):
            assert not set(re.findall(r"x\d+", divided)) & set(inner), subscript


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rotated_grouped_query_key_matches_eager(backend):
    torch.manual_seed(1)
    q, k, cos, sin = torch.randn(3, 5, 32), torch.randn(3, 5, 16), torch.randn(5, 8), torch.randn(5, 8)
    compiled = cc.compile(grouped_query_rotary, backend=backend)
    torch.testing.assert_close(compiled(q, k, cos, sin), grouped_query_rotary(q, k, cos, sin))
