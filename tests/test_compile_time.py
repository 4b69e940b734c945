"""Compile time scales with graph size: the scheduler's lookups are by name, its cycle check walks only
the groups between a pair (issue 6, item 7). Timed on CPU time of this process, so a busy machine
slows the test without failing it."""

import sys
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from compiler_core.decomp.table import decomposition_table, to_prim_graph
from compiler_core.ir.lowering import lower
from compiler_core.schedule.epilogues import schedule_with_epilogues
from tests.machine_speed import machine_slowness


class _Block(nn.Module):
    """A GPT-2 block at toy width: layer norms, attention with a causal mask, a GELU MLP."""

    def __init__(self, width: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        _, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, -1)
        causal = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        attn = ((q @ k.transpose(-1, -2)) * width ** -0.5).masked_fill(causal, float("-inf")).softmax(-1)
        x = x + self.proj(attn @ v)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def _loops(layers: int):
    torch.manual_seed(0)
    model = nn.Sequential(*[_Block(32) for _ in range(layers)]).eval()
    with torch.no_grad():
        gm = make_fx(model, decomposition_table=decomposition_table())(torch.randn(2, 8, 32))
    return lower(to_prim_graph(gm))


def _schedule_seconds(*graphs) -> list[float]:
    """The fastest of five schedules of each graph, the graphs taken in turn: the first run pays for warm
    caches, and on the shared 2-core CI machine the same code measured anywhere from 0.44 to 0.82 s of
    CPU time (neighbours, frequency); the minimum is the cost of scheduling, the spread is the machine.
    In turn, so that a neighbour starting or stopping (the suite runs in two processes beside the
    OpInfo sweeps) weighs on every graph alike: measured one after the other, 20 blocks once took 2.7x
    the time of 10 in a fresh-clone run."""
    best = [float("inf")] * len(graphs)
    for _ in range(5):
        for i, loops in enumerate(graphs):
            start = time.process_time()
            graph, sched = schedule_with_epilogues(loops)
            best[i] = min(best[i], time.process_time() - start)
            assert 10 < sched.kernel_count < len(graph.nodes) // 4  # a real schedule: many kernels, much fused
    return best


@pytest.mark.slow
def test_a_thousand_node_graph_schedules_within_a_second_and_scales_linearly():
    small, large = _loops(10), _loops(20)
    assert len(large.nodes) >= 1000, len(large.nodes)
    small_s, large_s = _schedule_seconds(small, large)
    slowness = machine_slowness()
    # Issue 6 asks for 0.5 s. Measured on the 2-core machine with the test suite running beside it:
    # 0.60 s before candidate plans shared their recomputed producers and skipped parameter naming
    # (kernel_plan.build_kernel_plan), 0.43 s after. Later passes brought it to 0.56-0.76 s (a CI run
    # failed at 0.76), half of it the cyclic collector: every candidate plan's trees hung on closures
    # that called themselves, and each collection walked torch's 400,000 objects. With no cycles and
    # the collector paused (gc_pause.py), 16 interleaved runs: min 0.47 s, median 0.55 s, where the
    # same code without the pause gave 0.66 and 0.91. The bound leaves room for a busier machine, and
    # grows with a slower one (measured by the same kind of Python work).
    assert large_s < 0.75 * slowness, (f"{len(large.nodes)} loop nodes scheduled in {large_s:.2f} s on a machine "
                                       f"{slowness:.2f}x slower than the development machine")
    # Twice the blocks: 2.0-2.1x here on an idle machine; a scan per lookup would make it 4x. 3x is room
    # for the noise of a shared machine, where measured one after the other it once reached 2.7x.
    assert large_s < 3.0 * small_s, f"twice the nodes took {large_s / small_s:.1f}x the time"


def test_loop_graph_and_schedule_look_up_by_name():
    loops = _loops(1)
    _, sched = schedule_with_epilogues(loops)
    for node in loops.nodes:
        assert loops.node(node.name) is node
        assert node.name in sched.group_of(node.name).nodes
    with pytest.raises(KeyError):
        loops.node("no_such_node")


def test_the_elementwise_fast_path_takes_the_same_decisions(monkeypatch):
    # _Scheduler._elementwise_chain skips building plans it knows cannot refuse: the schedule (every
    # group and every decision with its reason) must be what building each plan gives.
    from compiler_core.schedule import fusion

    loops = _loops(3)
    _, fast = schedule_with_epilogues(loops)
    monkeypatch.setattr(fusion._Scheduler, "CHAIN_FAST_PATH_MAX", 0)
    _, built = schedule_with_epilogues(loops)
    assert fast.pretty() == built.pretty()
    assert fast.kernel_count == built.kernel_count > 5


def test_schedule_and_decision_log_do_not_depend_on_the_hash_seed():
    # Python salts string hashes per process: any walk over a set of names would order the decision
    # log (and name a different node in a refusal) differently in every process, and what the
    # explorer shows or the kernel cache keys would change from run to run.
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = ("import sys, hashlib; sys.path.insert(0, 'tests')\n"
              "from test_compile_time import _loops\n"
              "from compiler_core.schedule.epilogues import schedule_with_epilogues\n"
              "print(hashlib.sha1(schedule_with_epilogues(_loops(2))[1].pretty().encode()).hexdigest())\n")
    root = Path(__file__).resolve().parents[1]
    digests = set()
    for seed in ("1", "2", "3"):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=300,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr[-2000:]
        digests.add(run.stdout.strip().splitlines()[-1])
    assert len(digests) == 1, digests


def _recurrence(x, steps):
    """Reads its running values twice per step: ~2^steps paths through ~steps distinct nodes."""
    a, b = torch.ones_like(x), x
    for _ in range(steps):
        a, b = b, b * x * 0.5 + a * 0.25
    return b


def test_a_value_shared_by_every_step_is_compiled_once_per_node():
    """A recurrence that reads its running values twice per step: after n steps the fused kernel's value
    tree has ~2^n paths and ~n distinct nodes. Traversing it by paths took a minute for 22 steps; each
    pass (simplify, inlining, printing) now visits a shared node once. Doubling the steps may at most
    about double the time, and the values are right."""
    import time

    import compiler_core as cc

    def chain(steps):
        return lambda x: _recurrence(x, steps)

    x = torch.rand(256)
    seconds = []
    for steps in (12, 24):
        fn = chain(steps)
        start = time.perf_counter()
        compiled = cc.compile(fn, backend="cpp")
        got = compiled(x)
        seconds.append(time.perf_counter() - start)
        torch.testing.assert_close(got, fn(x))
        assert compiled.session.stats["kernel_count"] == 1
    assert seconds[1] < 3 * seconds[0] + 2.0, seconds
    source = compiled.session.kernels[0].source
    assert source.count("0.25") <= 2 * 24, "each step's product printed once"


def test_every_printed_view_of_a_shared_value_tree_grows_linearly():
    """What the explorer prints of that kernel (the loop graph, the plan before and after each plan
    pass, the scheduled plan) names a long subtree read twice and prints it once (`%3 = ...`): printed
    in full, 40 steps of the recurrence are 2^40 characters, and opening the kernel's view hung."""
    import compiler_core as cc

    x = torch.rand(64)
    lengths = {}
    for steps in (20, 40):
        compiled = cc.compile(lambda x, steps=steps: _recurrence(x, steps), backend="cpp")
        torch.testing.assert_close(compiled(x), _recurrence(x, steps))
        record = compiled.session.graphs[0]
        kernel = record.kernels[0]
        texts = [record.loops.pretty(), kernel.plan.pretty(), *(p.after for p in kernel.passes)]
        lengths[steps] = max(len(t) for t in texts)
        assert "%0 = " in kernel.plan.pretty()
    assert lengths[40] < 3 * lengths[20] < 60_000, lengths


def test_a_chain_deeper_than_the_inlining_limit_splits_into_kernels():
    """100 steps of the recurrence are a chain of 400 pointwise nodes: past kernel_plan's inlining limit
    (120 levels), so the scheduler splits it. Inlining a level takes about nine Python frames: before
    stack_room.py, Python's default limit of 1,000 frames was hit before the scheduler's own limit, and
    the RecursionError sent the whole graph to eager (at 40 steps already)."""
    import compiler_core as cc

    x = torch.rand(64)
    limit_before = sys.getrecursionlimit()
    for steps in (40, 100):
        compiled = cc.compile(lambda x, steps=steps: _recurrence(x, steps), backend="cpp")
        torch.testing.assert_close(compiled(x), _recurrence(x, steps))
        record = compiled.session.graphs[0]
        assert record.fallback_reason is None, record.fallback_reason
        assert (len(record.kernels) == 1) == (steps == 40), len(record.kernels)
        assert sys.getrecursionlimit() == limit_before  # the room is given back


def test_a_shared_value_read_again_beside_a_row_cache_is_compiled_once_per_node():
    """The C++ reduction kernel's later passes over a row read the cached exp(b - max) and b itself:
    putting the cache into the pass's value rebuilt b's tree once per path (2^n for _recurrence): a
    33-bin histogram's kernels took 45 s to print on the CPU machine (2026-12-05). Now each shared
    node is rebuilt once."""
    import time

    import compiler_core as cc

    def softmax_beside(steps):
        def f(x):
            b = _recurrence(x, steps)
            e = torch.exp(b - b.amax(-1, keepdim=True))
            return e / e.sum(-1, keepdim=True) + b
        return f

    x = torch.rand(8, 64)
    seconds = []
    for steps in (10, 20):
        fn = softmax_beside(steps)
        start = time.perf_counter()
        compiled = cc.compile(fn, backend="cpp")
        got = compiled(x)
        seconds.append(time.perf_counter() - start)
        torch.testing.assert_close(got, fn(x))
        assert compiled.session.stats["fallback_ops"] == [] and compiled.session.stats["kernel_count"] >= 1
    source = "\n".join(k.source for k in compiled.session.kernels)
    assert "rowcache" in source, "the row cache this test is about"
    assert seconds[1] < 3 * seconds[0] + 2.0, seconds


def test_scheduling_leaves_no_cyclic_garbage():
    # Closures that call themselves (a memoised tree walk, the plan's producer inlining) made every
    # candidate plan's value trees wait for the cyclic collector: 232,000 objects on a 20-block graph.
    import gc

    # The collector is process-wide: a thread of an earlier test still at work (a C++ build, a compile
    # ahead) can leave cycles of its own meanwhile (150 objects in a cold-cache CI run, 2026-12-05), so
    # the cycles counted are those holding our compiler's objects: its classes, functions and frames.
    loops = _loops(2)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        graph, sched = schedule_with_epilogues(loops)
        assert sched.kernel_count > 0
        del graph, sched
        gc.collect()
        ours = [o for o in gc.garbage if _of_the_compiler(o)]
        assert ours == [], f"{len(ours)} of {len(gc.garbage)} cyclic objects are the compiler's: {ours[:5]}"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _of_the_compiler(obj) -> bool:
    """Whether obj is one of compiler_core's: an instance of its classes, its function or frame."""
    import types

    if isinstance(obj, types.FrameType):
        return "compiler_core" in obj.f_code.co_filename
    if isinstance(obj, types.FunctionType):
        return (obj.__module__ or "").startswith("compiler_core")
    return type(obj).__module__.startswith("compiler_core")


def test_an_unrolled_scan_asks_each_layout_inversion_once():
    """Mamba's selective scan without its CUDA kernel is a Python loop over the sequence, unrolled by
    Dynamo: every step slices, multiplies and stacks, and the scheduler asks the same inversions of
    a producer's layout (which loop variables wrote this offset) for every candidate group a node is
    part of: 19,167 asked, 980 distinct, 57 of 85 s of its compile (tiny Mamba, CPU). With static
    sizes an inversion and a substitution depend on their arguments alone and are remembered: that
    compile now takes 21 s (Inductor's, cold: 22 s). The scan's values are eager's."""
    import compiler_core as cc
    from compiler_core.ir.index import subs_static
    from compiler_core.schedule.kernel_plan import _inverted_static

    def scan(delta_a, delta_bx, c):
        state = torch.zeros_like(delta_a[:, :, 0])
        outputs = []
        for i in range(delta_a.shape[2]):
            state = delta_a[:, :, i] * state + delta_bx[:, :, i]
            outputs.append((state * c[:, None, i]).sum(-1))
        return torch.stack(outputs, dim=-1)

    torch._dynamo.reset()
    inputs = (torch.rand(2, 8, 12, 4), torch.randn(2, 8, 12, 4), torch.randn(2, 12, 4))
    before = _inverted_static.cache_info(), subs_static.cache_info()
    compiled = cc.compile(scan)
    torch.testing.assert_close(compiled(*inputs), scan(*inputs))
    assert compiled.session.stats["fallback_graphs"] == 0
    after = _inverted_static.cache_info(), subs_static.cache_info()
    for old, new in zip(before, after):
        asked, computed = (new.hits + new.misses) - (old.hits + old.misses), new.misses - old.misses
        assert computed > 0 and asked >= 2 * computed, (asked, computed)


def test_equal_copies_of_a_shared_tree_compare_in_time_linear_in_its_nodes():
    """Two equal trees built apart (a plan pass that rebuilt every load) whose subtrees are shared: the
    dataclass-made == compared once per path, 2^n for n steps (10 s of a 13 s compile of histogramdd,
    deciding whether a pass changed its plan). Each distinct pair is compared once now, and a tree
    that differs in one deep leaf is still told apart."""
    import dataclasses

    from compiler_core.ir.values import Constant, Op, rebuild

    def recurrence(steps: int, last: float):
        a = b = Constant(1.0, torch.float32)
        for i in range(steps):
            seed = Constant(last if i == 0 else 0.5, torch.float32)
            a, b = b, Op("add", (Op("mul", (b, seed), torch.float32), Op("mul", (a, b), torch.float32)),
                         torch.float32)
        return b

    steps = 18  # compared once per path: ~8 s on the 2-core machine (20 steps: ~50 s); once per pair: ms
    tree = recurrence(steps, 0.25)
    copy = rebuild(tree, lambda leaf: dataclasses.replace(leaf))  # every node a new, equal object
    assert copy is not tree
    start = time.process_time()
    assert copy == tree and tree == copy
    assert recurrence(steps, 0.75) != tree  # the first step's constant differs, deep down every path
    assert time.process_time() - start < 2.0
