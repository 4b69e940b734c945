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
    assert all(w.fn == w.function for w in launches)  # a worker finds the function by this name
    for w in launches:  # tensors by dtype, sizes as the ints the host program passes
        assert all(isinstance(a, (torch.dtype, int)) for a in w.args), w


def test_without_a_gpu_nothing_is_compiled_ahead(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    launch = WarmLaunch("k", "k", (1,), (torch.float32, 4096), (("XBLOCK", 64),))
    assert compile_ahead([launch], ("digest", "source")) == ""
    assert launch.job("digest")["args"] == [["dtype", "float32"], ["int", 4096]]  # what a worker reads
    monkeypatch.setenv("FCOMPILE_COMPILE_THREADS", "1")
    assert compile_threads() == 1
    monkeypatch.setenv("FCOMPILE_COMPILE_THREADS", "many")
    assert compile_threads() >= 1  # an unreadable setting: the default, capped at the machine's cores


def test_a_compile_worker_answers_each_job_and_files_the_binary_in_tritons_cache(tmp_path, monkeypatch):
    """The worker's protocol (runtime/compile_worker.py): ready once imported, one answer per job, the
    module text sent once and kept; a job that fails (no such function) is answered with its error and
    the worker takes the next; a job that compiles leaves a cubin in the parent's Triton cache. The
    worker never touches a GPU (its driver only names the target), so this runs on the CPU machine."""
    from compiler_core.codegen.triton.ahead import nvidia_target_available
    from compiler_core.runtime.parallel_compile import _Worker

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # read by each job, as the parent's now
    source = ("import triton\nimport triton.language as tl\n\n@triton.jit\n"
              "def k(x, XBLOCK: tl.constexpr):\n    tl.store(x + tl.arange(0, XBLOCK), 1.0)\n")
    worker = _Worker(["cuda", 90, 32])  # an H200 target
    try:
        assert worker.wait_ready()
        job = WarmLaunch(None, "missing", (1,), (torch.float32,), (("XBLOCK", 64),)).job("digest")
        assert worker.compile(job, source) is False and worker.alive
        assert "digest" in worker.modules  # the text went once
        job = WarmLaunch(None, "k", (1,), (torch.float32,), (("XBLOCK", 64),)).job("digest")
        assert worker.compile(job, None) is nvidia_target_available() and worker.alive
    finally:
        worker.close()
        worker.process.wait(timeout=30)
    assert worker.process.returncode == 0  # it left at the end of its input
    if nvidia_target_available():
        assert list(tmp_path.rglob("k.cubin")), sorted(p.name for p in tmp_path.rglob("*"))


def test_launches_of_a_symbolic_graph_are_named_at_the_example_sizes(monkeypatch):
    """dynamic=True: the launches compiled ahead are taken inside the compile, where the size symbols
    have example values; each grid and size argument comes out as a plain int (a split reduction over
    symbolic sizes is left to its launch)."""
    from compiler_core import api
    from compiler_core.ir.symbolic import example_values

    seen = []
    real = api.choose_configs

    def choose_and_list(kernels, loaded, graph):
        configs, log = real(kernels, loaded, graph)
        tuned = [k for k in kernels if len(k.config_space) > 1]
        seen.append((autotune._host_launches(list(kernels), configs, loaded, graph)
                     + autotune._timing_launches(tuned, loaded, graph), dict(example_values())))
        return configs, log

    monkeypatch.setattr(api, "choose_configs", choose_and_list)

    def fn(x, w):
        return torch.softmax(x @ w, -1) * 2, (x * 3).sum(-1)

    compiled = cc.compile(fn, backend="triton", dynamic=True)
    for rows in (5, 9):
        args = (torch.randn(rows, 16), torch.randn(16, 24))
        for actual, expected in zip(compiled(*args), fn(*args)):
            torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    assert any(g.symbolic for g in compiled.session.graphs), "expected a symbolic compilation"
    launches, sizes = seen[0]
    assert launches and sizes
    for w in launches:
        assert all(isinstance(g, int) for g in w.grid), w
        assert all(isinstance(a, (torch.dtype, int)) for a in w.args), w


def test_compiling_takes_the_ready_workers_and_runs_each_launch_once(monkeypatch):
    """Only workers that said ready take jobs (compiling never waits for one to start); each launch is
    compiled once, by a worker or by this process's threads; a worker that dies leaves its jobs to the
    others."""
    import threading

    from compiler_core.runtime import parallel_compile as pc

    class FakeWorker:
        def __init__(self, ready: bool, alive: bool = True, dies_after: int = 10**9):
            self.ready, self.alive, self.left, self.done = threading.Event(), alive, dies_after, []
            if ready:
                self.ready.set()

        def compile(self, job, source):
            if self.left == 0:
                self.alive = False
                return False
            self.left -= 1
            self.done.append(job["function"])
            return True

    class Fn:
        def __init__(self):
            self.here = []

        def warmup(self, *args, grid, **meta):
            self.here.append(meta["XBLOCK"])

    ready, starting, gone, dying = FakeWorker(True), FakeWorker(False), FakeWorker(True, alive=False), \
        FakeWorker(True, dies_after=2)
    monkeypatch.setattr(pc, "_WORKERS", [ready, starting, gone, dying])
    assert pc._ready_workers() == [ready, dying]
    fn = Fn()
    launches = [WarmLaunch(fn, f"k{i}", (1,), (torch.float32,), (("XBLOCK", i),)) for i in range(40)]
    by_workers, here = pc._on_workers(pc._ready_workers(), launches, "digest", "source")
    compiled = ready.done + dying.done + [f"k{i}" for i in fn.here]
    # Every launch ran once, but the one a worker held when it died (if it got that far: the others may
    # have drained the queue first); that launch compiles in the thread pass that follows.
    assert len(compiled) == len(set(compiled)) == 40 - (not dying.alive)
    assert set(compiled) <= {f"k{i}" for i in range(40)}
    assert by_workers == len(ready.done) + len(dying.done) and here == len(fn.here)
    assert not starting.done and len(dying.done) <= 2
