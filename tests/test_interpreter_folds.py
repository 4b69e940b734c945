"""Our combine functions folded with numpy in Triton's interpreter (runtime/interpreter_folds.py) give
the interpreter's own element-by-element results, bit for bit: the same kernel run from a module of
ours (claimed) and from a copy that is not (the interpreter's path) must agree on every output bit."""

import linecache

import numpy as np
import pytest
import torch

import compiler_core  # noqa: F401 - sets Triton's interpreter switch before Triton is imported
from compiler_core import _compat
from compiler_core.codegen.triton.kernel import COMBINE_FUNCTIONS
from compiler_core.runtime import interpreter_folds

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs where there is no GPU")

KERNEL = COMBINE_FUNCTIONS + '''
@triton.jit
def rows(x_ptr, out_ptr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xindex = tl.arange(0, XBLOCK)[:, None]
    rindex = tl.arange(0, RBLOCK)[None, :]
    block = tl.load(x_ptr + rindex + RBLOCK * xindex)
    tl.store(out_ptr + xindex, tl.reduce(block, 1, _COMBINE)[:, None])
'''


def module(combine: str, ours: bool) -> dict:
    source = "import triton\nimport triton.language as tl\n" + KERNEL.replace("_COMBINE", combine)
    filename = f"<fold test {combine} {'ours' if ours else 'theirs'}>"
    if ours:
        return _compat.exec_triton_module(source, filename, interpret=True)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"__name__": "someone_elses_kernels"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def special_rows(dtype: torch.dtype) -> torch.Tensor:
    """Rows of 8 with NaN first, last and twice, signed zeros in both orders, infinities and ties."""
    nan, inf = float("nan"), float("inf")
    rows = [[nan, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, nan], [0.0, -0.0, -1, -2, -3, -4, -5, -6],
            [-0.0, 0.0, -1, -2, -3, -4, -5, -6], [inf, -inf, 0, 1, inf, 2, 3, 4], [-inf] * 8,
            [2, 2, 2, 2, 2, 2, 2, 2], [3, nan, -nan, 1, 0, 0, 0, 0], [-0.0] * 4 + [0.0] * 4,
            [0.0] * 4 + [-0.0] * 4, [1.5, -2, 0.25, 4, -0.5, 3, 1e30, -1e30], [1e-40, -1e-40, 5, 6, 7, 8, 9, 1]]
    torch.manual_seed(0)
    random = torch.randn(20, 8) * 4
    random[torch.rand(20, 8) < 0.1] = nan
    return torch.cat([torch.tensor(rows), random]).to(dtype)[:32]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("combine", sorted(interpreter_folds.COMBINES))
def test_claimed_folds_give_the_interpreters_bits(combine, dtype):
    x = special_rows(dtype)
    outputs = []
    for ours in (True, False):
        namespace = module(combine, ours)
        out = torch.empty(32, dtype=dtype)
        namespace["rows"][(1,)](x, out, XBLOCK=32, RBLOCK=8)
        outputs.append(out)
    bits = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16}[dtype]
    ours, theirs = (o.view(bits) for o in outputs)
    assert torch.equal(ours, theirs), (x, outputs)
    # and the values are the rows' own reduction, NaN where a row holds one
    expected = {"_amax_combine": x.amax(1), "_amin_combine": x.amin(1), "_mul_combine": x.prod(1)}[combine]
    torch.testing.assert_close(outputs[0], expected, equal_nan=True, rtol=1e-3 if dtype == torch.float16 else 1e-5,
                               atol=0)


def test_only_our_modules_are_folded_with_numpy():
    ours, theirs = module("_amax_combine", True), module("_amax_combine", False)
    assert interpreter_folds._claimed.get(ours["_amax_combine"].fn) == "max"
    assert theirs["_amax_combine"].fn not in interpreter_folds._claimed


@pytest.mark.parametrize("fold", ["max", "min", "product"])
def test_fold_rows_along_either_axis_is_the_left_to_right_fold(fold):
    rng = np.random.default_rng(1)
    data = rng.standard_normal((5, 7)).astype(np.float32)
    data[rng.random((5, 7)) < 0.15] = np.nan
    data[0, :3] = [0.0, -0.0, 0.0]
    combine = {"max": lambda a, b: a if (a > b or a != a) else b,
               "min": lambda a, b: a if (a < b or a != a) else b,
               "product": lambda a, b: np.float32(a * b)}[fold]
    for axis in (0, 1):
        got = interpreter_folds.fold_rows(fold, data, axis)
        rows = data if axis == 1 else data.T
        expected = []
        for row in rows:
            acc = row[0]
            for value in row[1:]:
                acc = combine(acc, value)
            expected.append(acc)
        assert np.array_equal(got.view(np.int32), np.array(expected, dtype=np.float32).view(np.int32))
