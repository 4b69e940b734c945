"""runtime/parallel_compile.py and the launches autotune.py compiles ahead (the pool itself needs a GPU:
tests/test_gpu.py runs it). Here: the launches it would compile are the host program's launches, one
for one, so a change to how the host program launches cannot leave the pool compiling the wrong ones."""

import re

import torch

import compiler_core as cc
from compiler_core.runtime import autotune
from compiler_core.runtime.build import LoadedKernels
from compiler_core.runtime.parallel_compile import WarmLaunch, compile_ahead, compile_threads


def _launch_sites(source: str) -> list[tuple[str, tuple]]:
    """(function, grid) of each `k.<function>[<grid>](` in a host program with static sizes."""
    return [(name, eval(grid)) for name, grid in re.findall(r"k\.(\w+)\[(\([^\]]*\))\]\(", source)]


def test_the_launches_compiled_ahead_are_the_host_programs_launches():
    def fn(x, w, b, big):
        return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (64,), w, b)), big.sum(), x.amax(0)

    args = (torch.randn(300, 64), torch.randn(64), torch.randn(64), torch.randn(1 << 21))
    compiled = cc.compile(fn, backend="triton")
    for actual, expected in zip(compiled(*args), fn(*args)):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    record = compiled.session.graphs[0]
    kernels = record.kernels
    assert any(k.split is not None for k in kernels), "the sum of 2^21 elements should be a split reduction"
    names = {f for k in kernels for f in k.function_names}
    loaded = LoadedKernels(functions={f: f for f in names}, cache_hit=False)  # functions named by their names
    launches = autotune._host_launches(list(kernels), record.artifact.chosen_configs, loaded, record.loops)
    assert [(w.fn, w.grid) for w in launches] == _launch_sites(record.wrapper.source)
    for w in launches:  # tensors by dtype, sizes as the ints the host program passes
        assert all(isinstance(a, (torch.dtype, int)) for a in w.args), w


def test_without_a_gpu_nothing_is_compiled_ahead(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compile_ahead([WarmLaunch("k", (1,), (torch.float32,), (("XBLOCK", 64),))]) == ""
    monkeypatch.setenv("FCOMPILE_COMPILE_THREADS", "1")
    assert compile_threads() == 1
    monkeypatch.setenv("FCOMPILE_COMPILE_THREADS", "many")
    assert compile_threads() >= 1  # an unreadable setting: the default, capped at the machine's cores
