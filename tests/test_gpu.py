"""GPU suite: the generated Triton compiled for real (not the interpreter) on CUDA tensors.

Run on a machine with a GPU: `python -m pytest -m gpu tests/test_gpu.py`.  Skipped without CUDA.
"""

import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from programs import PROGRAMS

import compiler_core as cc

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _cuda(args):
    return tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)


@pytest.mark.parametrize("name,fn,make_inputs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_compiled_triton_matches_eager(name, fn, make_inputs):
    torch.manual_seed(0)
    args = _cuda(make_inputs())
    compiled = cc.compile(fn)  # backend auto: Triton for CUDA tensors
    actual = compiled(*args)
    torch.testing.assert_close(actual, fn(*args), equal_nan=True)
    s = compiled.session
    assert not [g.fallback_reason for g in s.all_records() if g.fell_back]
    assert all(k.backend == "triton" for k in s.kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_row_kernels_on_gpu(dtype):
    x = torch.randn(512, 4096, device="cuda", dtype=dtype)
    w, b = torch.randn(4096, device="cuda", dtype=dtype), torch.randn(4096, device="cuda", dtype=dtype)
    for fn, args in ((lambda x: torch.softmax(x, -1), (x,)),
                     (lambda x, w, b: F.gelu(F.layer_norm(x, (4096,), w, b)), (x, w, b))):
        compiled = cc.compile(fn)
        tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
        torch.testing.assert_close(compiled(*args), fn(*args), **tol)
        assert compiled.session.stats["kernel_count"] == 1


def test_looped_reduction_on_gpu():
    x = torch.randn(8, 100_000, device="cuda")
    compiled = cc.compile(lambda x: torch.softmax(x, -1))
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1))


def test_autotuning_times_candidate_configs_and_caches_the_choice():
    x = torch.randn(4096, 2048, device="cuda")
    compiled = cc.compile(lambda x: torch.softmax(x, -1) * 2)
    torch.testing.assert_close(compiled(x), torch.softmax(x, -1) * 2)
    assert not compiled.session.graphs[0].fell_back, compiled.session.graphs[0].fallback_reason
    kernel = compiled.session.kernels[0]
    artifact = compiled.session.graphs[0].artifact
    assert not any("tuning failed" in line for line in artifact.tuning_log), artifact.tuning_log
    assert len(kernel.config_space) > 1
    assert artifact.chosen_configs[kernel.name] in [dict(c) for c in kernel.config_space]
    assert any("us" in line for line in artifact.tuning_log) or any("cached" in line for line in artifact.tuning_log)
    again = cc.compile(lambda x: torch.softmax(x, -1) * 2)
    again(x)
    assert any("cached" in line for line in again.session.graphs[0].artifact.tuning_log)


def test_every_launch_is_compiled_ahead_and_none_compiles_in_line(tmp_path, monkeypatch):
    """runtime/parallel_compile.py: the tuning candidates and the host program's launches (a tuned row
    kernel, a gather with device asserts, a split full reduction) compile on the workers and threads
    before anything runs, so no launch compiles in line; and the values are eager's."""
    knobs = pytest.importorskip("triton.knobs")
    from triton.runtime import _async_compile  # noqa: F401 - Triton 3.5+: what the pool needs
    monkeypatch.setenv("FCOMPILE_CACHE_DIR", str(tmp_path))  # no tuning result from an earlier run
    monkeypatch.setenv("FCOMPILE_COMPILE_THREADS", "8")
    monkeypatch.setenv("FCOMPILE_COMPILE_WORKERS", "1")  # the default, whatever the environment says
    compiles = []

    def record(**kw):
        compiles.append((getattr(kw["fn"], "name", kw.get("repr")), kw["is_manual_warmup"]))
        return False  # compile as usual

    monkeypatch.setattr(knobs.runtime, "jit_cache_hook", record)
    from compiler_core.runtime import parallel_compile

    parallel_compile.start_workers()
    assert parallel_compile._WORKERS and all(w.wait_ready() for w in parallel_compile._WORKERS)

    def fn(x, w, b, table, idx, big):  # constants of its own: no other test compiled these kernels
        h = F.gelu(F.layer_norm(x, (2048,), w, b)) * 1.2371
        return h, table[idx].sum(-1) * 0.731, big.sum() * 0.377

    torch.manual_seed(0)
    args = (torch.randn(4096, 2048, device="cuda"), torch.randn(2048, device="cuda"),
            torch.randn(2048, device="cuda"), torch.randn(1000, 64, device="cuda"),
            torch.randint(0, 1000, (8192,), device="cuda"), torch.randn(1 << 24, device="cuda"))
    compiled = cc.compile(fn)
    for actual, expected in zip(compiled(*args), fn(*args)):
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
    s = compiled.session
    assert not [g.fallback_reason for g in s.all_records() if g.fell_back]
    log = s.graphs[0].artifact.tuning_log
    ahead = [line for line in log if line.startswith("compiled ahead:")]
    assert ahead and re.search(r"\(([1-9]\d*) by \d+ workers", ahead[0]), log  # the workers took some
    assert any(warm for _, warm in compiles), compiles
    assert [name for name, warm in compiles if not warm] == [], (compiles, log)
    # The workers compile without a CUDA context of their own (each would hold ~500 MiB of the GPU).
    smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                         capture_output=True, text=True)
    on_gpu = {int(p) for p in smi.stdout.split() if p.strip().isdigit()} if smi.returncode == 0 else set()
    if os.getpid() in on_gpu:  # pids as this process sees them (not a container's host pids)
        assert not on_gpu & {w.process.pid for w in parallel_compile._WORKERS}, smi.stdout


def test_a_compile_workers_binary_is_the_one_this_process_loads(tmp_path, monkeypatch):
    """A worker (which imports neither torch nor a CUDA context) files its binary under the key this
    process's own compile of the same launch looks up: this process then loads it and files nothing."""
    pytest.importorskip("triton.runtime._async_compile")
    from compiler_core import _compat
    from compiler_core.runtime.parallel_compile import WarmLaunch, _gpu_target, _Worker

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    source = ("import triton\nimport triton.language as tl\n\n@triton.jit\n"
              "def copy_scaled(x, y, n, XBLOCK: tl.constexpr):\n"
              "    o = tl.arange(0, XBLOCK)\n"
              "    tl.store(x + o, tl.load(y + o, mask=o < n).to(tl.float32) * 0.6173, mask=o < n)\n")
    fn = _compat.exec_triton_module(source, f"<worker test {tmp_path.name}>", False)["copy_scaled"]
    launch = WarmLaunch(fn, "copy_scaled", (1,), (torch.float32, torch.bfloat16, 48),
                        (("XBLOCK", 64), ("num_warps", 4)))
    worker = _Worker(_gpu_target())
    try:
        assert worker.wait_ready() and worker.compile(launch.job("worker-test"), source)
    finally:
        worker.close()
    def kernels_filed():  # Triton's driver files its own launcher module there too: binaries only
        return sorted(p.parent.name for p in tmp_path.rglob("*.cubin"))

    filed = kernels_filed()
    assert filed, "the worker filed nothing"
    x, y = torch.zeros(64, device="cuda"), torch.randn(64, device="cuda", dtype=torch.bfloat16)
    fn[(1,)](x, y, 48, XBLOCK=64, num_warps=4)
    assert kernels_filed() == filed  # loaded from disk, not compiled again
    torch.testing.assert_close(x[:48], y[:48].float() * 0.6173)
    assert (x[48:] == 0).all()


def test_reduce_overhead_replays_a_cuda_graph():
    def tiny_chain(x):
        for _ in range(20):
            x = torch.sin(x) * 1.01 + 0.1
        return x

    x = torch.randn(1024, device="cuda")
    compiled = cc.compile(tiny_chain, mode="reduce-overhead")
    first = compiled(x)
    torch.testing.assert_close(first, tiny_chain(x))
    assert compiled.session.graphs[0].artifact.cudagraph.startswith("used")
    y = torch.randn(1024, device="cuda")
    second = compiled(y)  # replay with new input values
    torch.testing.assert_close(second, tiny_chain(y))
    torch.testing.assert_close(first, tiny_chain(x))  # the earlier result was not overwritten


def test_cudagraph_skip_reason_is_recorded_for_default_mode():
    compiled = cc.compile(lambda x: x + 1)
    compiled(torch.randn(8, device="cuda"))
    assert compiled.session.graphs[0].artifact.cudagraph == "not used: mode is default"


@pytest.mark.parametrize("backend", ["auto", "triton", "cpp"])
def test_mixed_device_graph_matches_eager_and_says_why_it_ran_in_eager(backend):
    # A 0-d CPU tensor beside CUDA tensors is legal in eager. Our kernels read every tensor through
    # one device's pointers, so the graph runs in eager PyTorch and the session says why.
    def fn(x, scale):
        return torch.softmax(x * scale, -1) + 1

    x, scale = torch.randn(8, 32, device="cuda"), torch.tensor(0.5)
    compiled = cc.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(x, scale), fn(x, scale))
    s = compiled.session
    assert not s.kernels
    assert s.stats["fallback_graphs"] == 1
    assert any("more than one device (cpu, cuda)" in m for m in s.messages), s.messages


def test_cpu_tensor_made_inside_a_cuda_graph():
    # torch.tensor(...) inside the function is a lifted CPU constant beside CUDA tensors (T5 and
    # BART do this): our Triton kernels must never be handed its CPU pointer.
    def f(x):
        limit = torch.tensor(0.5)
        return torch.where(x > limit, x, limit) * 2 + torch.tensor(1.0)

    x = torch.randn(64, 32, device="cuda")
    compiled = cc.compile(f)
    torch.testing.assert_close(compiled(x), f(x))
    assert compiled.session.stats["fallback_graphs"] == 0, compiled.session.messages


INDEXED_LOADS = {
    "embedding": (lambda w, i: torch.nn.functional.embedding(i, w) * 2,
                  lambda: (torch.randn(50, 8, device="cuda"), torch.randint(0, 50, (4, 6), device="cuda"))),
    "gather": (lambda x, i: torch.gather(x, 1, i) + 1,
               lambda: (torch.randn(6, 9, device="cuda"), torch.randint(-9, 9, (6, 4), device="cuda") % 9)),
    "index_select": (lambda x, i: x.index_select(0, i).relu(),
                     lambda: (torch.randn(7, 5, device="cuda"), torch.tensor([6, 0, 3, 3], device="cuda"))),
    "index_negative": (lambda x, i: x[i] * 3, lambda: (torch.randn(7, 5, device="cuda"),
                                                       torch.tensor([-1, 2, -7], device="cuda"))),
    "take": (lambda x, i: torch.take(x, i).exp(), lambda: (torch.randn(4, 5, device="cuda"),
                                                          torch.tensor([[0, 19], [-20, 7]], device="cuda"))),
    "interpolate": (lambda x: torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear") * 2,
                    lambda: (torch.randn(2, 3, 5, 7, device="cuda"),)),
    # BERT's token types: a two-row table in a reduction kernel, which autotuning times on random
    # integer inputs (out of range for two rows: tuning must never trip the assert)
    "embedding_layer_norm": (lambda w, i: F.layer_norm(F.embedding(i, w), (768,)),
                             lambda: (torch.randn(2, 768, device="cuda"),
                                      torch.randint(0, 2, (8, 512), device="cuda"))),
    "max_pool_argmax": (lambda x: (F.max_pool2d(x, 3, 2, 1).relu(), x.flatten(2).argmax(-1)),
                        lambda: (torch.randn(8, 64, 56, 56, device="cuda"),)),
}


@pytest.mark.parametrize("name", sorted(INDEXED_LOADS))
def test_tensor_indexed_loads_compile_on_cuda(name):
    # Our kernels read through index tensors on the GPU too, with a device-side assert on the
    # position as eager's CUDA kernels have (the out-of-range case: the next test).
    fn, make = INDEXED_LOADS[name]
    args = make()
    compiled = cc.compile(fn)
    torch.testing.assert_close(compiled(*args), fn(*args))
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0, compiled.session.messages
    if name not in ("interpolate", "max_pool_argmax"):  # positions computed, not read from a tensor
        assert any("tl.device_assert(" in k.source for k in compiled.session.kernels)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_upsample_runs_without_range_checks_on_cuda(dtype):
    # SegFormer's head: logits upsampled 56 -> 224, then a log-softmax over the classes. The upsample's
    # positions are clamped coordinates, recomputed from the loop indices (schedule/index_inline.py)
    # and proven inside the input (plan pass `bounds`), so the kernel has no device assert and is not
    # built in Triton's debug mode, which made it ~25x slower than Inductor's (1815 vs 68 us, H200).
    def head(logits):
        up = F.interpolate(logits, size=(224, 224), mode="bilinear", align_corners=False)
        return up.float().log_softmax(1)
    logits = torch.randn(8, 19, 56, 56, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    compiled = cc.compile(head)
    torch.testing.assert_close(compiled(logits), head(logits), rtol=1e-4, atol=1e-4)
    sources = "\n".join(k.source for k in compiled.session.kernels)
    assert "tl.device_assert(" not in sources and "bounds: " in sources, sources
    inductor = torch.compile(head)
    inductor(logits)
    ours_ms, inductor_ms = (_median_ms(lambda f=f: f(logits)) for f in (compiled, inductor))
    assert ours_ms < 3 * inductor_ms, (ours_ms, inductor_ms)


def test_upsample_beside_a_loss_keeps_only_the_labels_check_on_cuda():
    # With a cross entropy at the labels, the labels come from memory: that gather keeps its check
    # (eager's error for a label out of range), the upsample's positions still have none.
    def loss(logits, labels):
        up = F.interpolate(logits, size=(224, 224), mode="bilinear", align_corners=False)
        return F.cross_entropy(up, labels)
    logits = torch.randn(2, 19, 56, 56, device="cuda")
    labels = torch.randint(0, 19, (2, 224, 224), device="cuda")
    compiled = cc.compile(loss)
    torch.testing.assert_close(compiled(logits, labels), loss(logits, labels))
    sources = "\n".join(k.source for k in compiled.session.kernels)
    asserts = [line for line in sources.splitlines() if "tl.device_assert(" in line]
    assert asserts and all("< 19)" in line for line in asserts), asserts


def _median_ms(call, repeats=30):
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def test_out_of_range_index_stops_the_kernel_on_cuda():
    # Eager CUDA stops with a device-side assert (the CUDA context is then unusable, so this runs in
    # a child process); ours must do the same, never read another row without a word.
    script = (
        "import torch, compiler_core as cc\n"
        "w = torch.randn(50, 8, device='cuda'); ids = torch.tensor([[3, 50]], device='cuda')\n"
        "f = cc.compile(lambda w, i: torch.nn.functional.embedding(i, w) * 2)\n"
        "out = f(w, ids); torch.cuda.synchronize(); print('NO ERROR', out.sum().item())\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "NO ERROR" not in run.stdout, run.stdout
    assert run.returncode != 0
    assert "device-side assert" in run.stderr or "index out of range in self" in run.stderr, run.stderr[-2000:]


def test_kernels_write_over_dying_inputs_on_cuda():
    # tests/test_memory_inplace.py on the GPU: written in place, the values still match eager.
    def swish_and_row_sums(x, w):
        y = x @ w
        g = y * torch.sigmoid(y)
        return g, g.sum(-1)

    x, w = torch.randn(256, 128, device="cuda"), torch.randn(128, 512, device="cuda")
    session = cc.explain(swish_and_row_sums, x, w)
    (record,) = session.graphs
    assert len(record.memory.written_over) == 1, record.memory.pretty()
    torch._dynamo.reset()
    got = cc.compile(swish_and_row_sums, debug="memory")(x, w)
    for a, b in zip(got, swish_and_row_sums(x, w)):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_full_reductions_are_split_and_match_eager(dtype):
    # 4e6 elements in one row: partials over many programs, then the finishing kernels (var: two passes)
    x = (torch.randn(4_000_000, device="cuda") + 0.5).to(dtype)
    x[1_234_567] = float("nan")
    y = x.nan_to_num()
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-3, "rtol": 1e-4}
    for fn, arg in ((lambda x: x.sum(), y), (lambda x: x.abs().max(), x), (lambda x: x.abs().max(), y),
                    (lambda x: x.mean(), y), (lambda x: x.var(), y), (lambda x: (x - x.mean()) / x.std(), y)):
        compiled = cc.compile(fn)
        torch.testing.assert_close(compiled(arg), fn(arg), equal_nan=True, **tol)
        assert all(k.split is not None for k in compiled.session.kernels), [k.source for k in compiled.session.kernels]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_column_reductions_match_eager(dtype):
    # Sums over the outer dimension (bias gradients): columns layout, split when few column blocks
    # run (1000 columns: 16 blocks), not split when many do (20000 columns), and two passes (var).
    tol = {"atol": 5e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-3, "rtol": 1e-4}
    for shape, split in (((8192, 1000), True), ((4096, 20000), False), ((8, 1024, 768), True)):
        x = torch.randn(shape, device="cuda", dtype=dtype)
        dims = tuple(range(x.dim() - 1))
        for fn in (lambda x, d=dims: x.sum(d), lambda x, d=dims: x.amax(d), lambda x, d=dims: x.var(d),
                   lambda x, d=dims: (F.gelu(x), F.gelu(x).sum(d))):
            compiled = cc.compile(fn)
            torch.testing.assert_close(compiled(x), fn(x), **tol)
            (kernel,) = [k for k in compiled.session.kernels if k.kind == "reduction"]
            assert kernel.plan.columns and (kernel.split is not None) == split, kernel.source


def test_bias_and_layer_norm_gradients_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(768, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 768),
                                torch.nn.LayerNorm(768)).cuda()
    x = torch.randn(8, 512, 768, device="cuda")
    compiled = cc.compile(model)
    compiled(x).square().mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(x).square().mean().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, atol=1e-5, rtol=1e-3)
    backward = [k for g in compiled.session.graphs if g.backward for k in g.backward.kernels]
    assert sum(k.plan.columns for k in backward) >= 2, [k.plan.pretty() for k in backward]


def test_host_scalar_constants_in_a_cuda_graph_are_read_as_literals():
    """T5's _shift_right writes a Python int into a CUDA tensor: the graph lifts torch.tensor(0) on the host
    and fills with it. Our kernels read such 0-d host constants as literals instead of leaving both ops
    to PyTorch (they were T5's and BART's fallback ops on the H200)."""
    def shift_right(ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[..., 1:] = ids[..., :-1].clone()
        shifted[..., 0] = 7
        shifted.masked_fill_(shifted == -100, 3)
        return shifted * torch.tensor(2) + torch.tensor(0.5, dtype=torch.float64).to(torch.float32)

    ids = torch.randint(-100, 50, (4, 33), device="cuda")
    compiled = cc.compile(shift_right)
    torch.testing.assert_close(compiled(ids), shift_right(ids))
    stats = compiled.session.stats
    assert stats["fallback_ops"] == [] and stats["fallback_graphs"] == 0, stats


def test_repeated_launches_through_the_binary_match_eager():
    """After a kernel's first launch, later launches with the same specialization go through Triton's
    compiled binary (runtime/triton_launch.py). Every call must still match eager, inputs at offsets that
    are not 16-byte aligned among them (Triton compiles another binary for those), and the binaries
    must have been used."""
    from compiler_core.runtime.triton_launch import FastKernel
    from explorer.profiling import host_namespace

    def f(x, w):
        return torch.softmax(x * w, -1) + x.sum(0) + torch.nn.functional.gelu(x).mean(1, keepdim=True)

    base = torch.randn(256 * 512 + 3, device="cuda")
    w = torch.randn(512, device="cuda")
    compiled = cc.compile(f)
    for offset in (0, 0, 1, 0, 3, 1, 0):
        x = base[offset: offset + 256 * 512].view(256, 512)
        torch.testing.assert_close(compiled(x, w), f(x, w))
    scope = host_namespace(compiled.session.graphs[0].artifact.call)
    kernels = [fn for fn in vars(scope["k"]).values() if isinstance(fn, FastKernel)]
    assert kernels
    binaries = [key for fn in kernels for key in fn.proven]
    misaligned = [key for key in binaries if any(isinstance(e, tuple) and isinstance(e[0], torch.dtype) and not e[1]
                                                 for e in key)]
    assert binaries and misaligned, "no launch went through a binary, or none with a misaligned input"
    if hasattr(torch._C, "_StaticCudaLauncher"):  # aligned launches go through torch's C++ launcher
        direct = [d for fn in kernels for d in fn.direct.values()]
        assert any(d is not None and d.proven for d in direct), "no launch went through torch's launcher"


def test_a_multiply_and_an_add_round_twice_on_the_gpu():
    """Triton contracts a * b + c into one FMA by default; ours are compiled without, so each op rounds
    as eager's separate kernels do (tests/test_trust.py checks the C++ backend and the option)."""
    torch.manual_seed(0)
    x = torch.randn(1 << 16, device="cuda") * 8

    def fn(x):
        return x * 2.6 - 2.6, ((x * 2.6 - 2.6) + 0.5).to(torch.int64)

    for got, expected in zip(cc.compile(fn)(x), fn(x)):
        assert torch.equal(got, expected), (got != expected).sum()


def test_negation_and_copysign_keep_the_sign_of_zero_on_the_gpu():
    """Triton 3.6 compiles a float's -x as 0 - x: -(+0.0) came out +0.0. Ours multiply by -1."""
    x = torch.tensor([0.0, -0.0, 1.5, -2.0, float("inf")], device="cuda")

    def fn(x):
        return -x, torch.copysign(x.abs(), -torch.ones_like(x)), torch.pow(-x, 3)

    for got, expected in zip(cc.compile(fn)(x), fn(x)):
        assert torch.equal(got, expected) and torch.equal(torch.signbit(got), torch.signbit(expected))


# Float32 functions whose value at a subnormal x is about x (or a fixed multiple) or which map a subnormal
# to a normal value: a flush to zero shows as 0, pi/2 -> 0, or -inf where eager keeps the subnormal.
_SUBNORMAL_UNARY = ["sin", "tan", "tanh", "sinh", "asin", "atan", "asinh", "atanh", "erf", "expm1", "log1p",
                    "sqrt", "rsqrt", "log", "log2", "abs", "neg", "sigmoid", "exp", "cos", "erfinv",
                    "trunc", "sign", "reciprocal", "nan_to_num", "frexp_mantissa", "cbrt"]


def _subnormal_unary(name):
    if name == "frexp_mantissa":
        return lambda x: torch.frexp(x)[0]
    if name == "cbrt":  # no torch.cbrt: x ** (1/3) of the magnitude, with its sign
        return lambda x: torch.sign(x) * x.abs().pow(1 / 3)
    op = getattr(torch, name)
    return lambda x: op(x)  # not torch's builtin itself: Dynamo's cache of it is shared with other tests


@pytest.mark.parametrize("name", _SUBNORMAL_UNARY)
def test_float32_functions_keep_subnormal_values_on_the_gpu(name):
    """Triton links libdevice in flush-to-zero mode unless told not to: our atan2(1e-40, 0) gave 0, not
    pi/2 (found by the complex log's edge test on CUDA), and sin(1e-40) gave 0. Eager's CUDA kernels
    keep subnormals; ours are compiled with `enable_reflect_ftz` off, and every float32 function here
    must give eager's value at subnormal inputs (a flush shows as a difference of the whole value)."""
    tiny = torch.tensor([1e-40, -1e-40, 3e-39, -7e-39, 1.1e-38, 1.4e-45, 0.0, 0.5, -0.25], device="cuda")
    fn = _subnormal_unary(name)
    got, expected = cc.compile(fn)(tiny), fn(tiny)
    # one subnormal step (1.4e-45) of absolute room: eager's and libdevice's last-bit rounding may differ
    torch.testing.assert_close(got, expected, rtol=2e-6, atol=1.5e-45, equal_nan=True)


def test_float32_binary_functions_keep_subnormal_values_on_the_gpu():
    a = torch.tensor([1e-40, -1e-40, 3e-39, 1.0, 0.0, 1e-40, 2.0], device="cuda")
    b = torch.tensor([0.0, 0.0, -1.0, 1e-40, -1e-40, 1e-40, 1e-39], device="cuda")

    def fn(a, b):
        return (torch.atan2(a, b), torch.hypot(a, b), torch.copysign(a, b), torch.fmod(a, 1.0), torch.maximum(a, b),
                a * b * 1e30, torch.pow(a.abs(), 0.5), torch.remainder(b, 1e-39))

    for got, expected in zip(cc.compile(fn)(a, b), fn(a, b)):
        torch.testing.assert_close(got, expected, rtol=2e-6, atol=1.5e-45, equal_nan=True)


def test_float32_division_square_root_exp_and_sigmoid_are_eagers_bit_for_bit_on_the_gpu():
    """Triton's float32 `/` is div.full.f32: on an H100 our compiled x / y differed from eager's in
    1,205,557 of 4,194,304 random pairs (the same through float64, rounded once: 0). Ours divide with
    div_rn, take sqrt_rn, and call libdevice's expf as eager's kernels do; compared bit for bit. The
    libdevice functions (hypot, asinh, acosh, atan2, erf, pow) are eager's bit for bit where the CUDA
    toolkit torch was built with is installed (its libdevice linked, its square roots rounded to nearest:
    runtime/eager_libdevice.py); with Triton's copy they are within 2 ulp."""
    from compiler_core.runtime.triton_launch import eager_libdevice_path

    torch.manual_seed(0)
    x, y = torch.randn(1 << 22, device="cuda"), torch.randn(1 << 22, device="cuda")

    def ieee(x, y):
        return x / y, torch.sqrt(y.abs()), torch.exp(x * 8), torch.sigmoid(x * 4), torch.reciprocal(y)

    def libdevice(x, y):
        return (torch.hypot(x, y * 3), torch.asinh(x * 5), torch.acosh(y.abs() * 4 + 1), torch.atan2(x, y),
                torch.erf(x), torch.pow(y.abs(), x))

    exact = eager_libdevice_path() is not None
    for fn, ulps in ((ieee, 0), (libdevice, 0 if exact else 2)):
        for k, (got, expected) in enumerate(zip(cc.compile(fn)(x, y), fn(x, y))):
            apart = (got.view(torch.int32).long() - expected.view(torch.int32).long()).abs()
            apart[got.isnan() & expected.isnan()] = 0
            assert int(apart.max()) <= ulps, (fn.__name__, k, int((apart > ulps).sum()), int(apart.max()))


def test_float_remainder_and_floor_division_are_eagers_on_the_gpu():
    """remainder(a, b) as eager's CUDA kernel computes it, fmod moved by b where the signs differ, and
    floor division from the same fmod (floor_divide(1.0, 0.1) is 9, not floor(10.0)); the
    quotient formula a - floor(a / b) * b rounds a / b (wrong digits where it is large, as
    remainder(12345678.9, -0.1)) and gave inf at remainder(-1, 1e-39), where a / b overflows."""
    a = torch.tensor([1e30, -1e30, 12345678.9, -1.0, 7.5, -7.5, 0.0, -0.0, float("inf")], device="cuda")
    b = torch.tensor([3.0, 3.0, -0.1, 1e-39, -2.0, 2.0, -3.0, 3.0, 2.0], device="cuda")

    def fn(a, b):
        return (torch.remainder(a, b), torch.remainder(a, 3.0), torch.remainder(a.double(), b.double()),
                torch.floor_divide(a, b), torch.floor_divide(torch.ones_like(a), 0.1), torch.fmod(a, b))

    for got, expected in zip(cc.compile(fn)(a, b), fn(a, b)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(got.signbit() | got.isnan(), expected.signbit() | expected.isnan())


def test_convolution_graphs_run_channels_last_on_the_gpu_on_request():
    """conv_layout="channels_last" (decomp/conv_layout.py): a bf16 ResNet's activations in channels-last
    on the GPU, its outputs matching as the zoo judges them and with eager's strides, and fewer cuDNN
    transposes than eager. (fp32 is left out: cuDNN runs NHWC fp32 convolutions in TF32 by default, 3x
    eager's error on this model; the module docstring says more.)"""
    from torch.profiler import ProfilerActivity, profile

    from tests.models.check import named_tensors, run_inference
    from tests.models.zoo import ZOO

    run = run_inference(ZOO["resnet"], "small", "cuda", torch.bfloat16, mask=True,
                        options={"conv_layout": "channels_last"})
    assert run.ok, run.match.describe()
    decision = run.session.graphs[0].layout
    assert decision.channels_last, decision.pretty()
    case, compiled = run.case, run.compiled
    with torch.no_grad():
        expected, got = named_tensors(case.model(**case.inputs)), named_tensors(compiled(**case.inputs))
    for key, value in expected.items():
        assert got[key].stride() == value.stride(), key

    def transposes(fn):
        with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as p:
            fn(**case.inputs)
            torch.cuda.synchronize()
        return sum(1 for e in p.events() if "nhwcToNchw" in e.name)

    # cuDNN transposes each NCHW result back; channels-last results need no such pass.
    assert transposes(compiled) < max(1, transposes(case.model)), decision.pretty()


def test_online_softmax_over_a_vocabulary_matches_eager_on_the_gpu():
    """Rows of 50,257 (GPT-2's vocabulary) take their max and sum of exponentials in one pass
    (plan_passes.online_softmax), edge rows included; cross entropy over bf16 logits as an LM head's."""
    from test_online_softmax import edge_rows

    def softmaxes(x):
        return torch.softmax(x, -1), torch.log_softmax(x, -1)

    x = edge_rows(50257).cuda()
    compiled = cc.compile(softmaxes)
    for got, expected in zip(compiled(x), softmaxes(x)):
        torch.testing.assert_close(got, expected, equal_nan=True)
    assert any("online softmax" in n for k in compiled.session.kernels for n in k.plan.notes)

    torch.manual_seed(0)
    logits = (torch.randn(512, 50257, device="cuda") * 4).to(torch.bfloat16)
    target = torch.randint(0, 50257, (512,), device="cuda")

    def loss(logits, target):
        return F.cross_entropy(logits.float(), target)

    torch.testing.assert_close(cc.compile(loss)(logits, target), loss(logits, target))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_welford_layer_norm_over_wide_rows_matches_eager_on_the_gpu(dtype):
    """Rows of 65,536 take their mean and sum of squares in one pass (plan_passes.welford): layer norm
    with weight and bias, var_mean and std, edge rows included (NaN, +-inf, constant, a far mean)."""
    from test_welford import INF_ROWS, edge_rows

    width = 65536
    torch.manual_seed(0)
    w, b = torch.randn(width, device="cuda", dtype=dtype), torch.randn(width, device="cuda", dtype=dtype)
    wide = (torch.randn(256, width, device="cuda") * 2 + 3).to(dtype)
    edges = edge_rows(width, offset=50.0).cuda().to(dtype)

    def norm(x, w, b):
        return F.layer_norm(x, (width,), w, b)

    for x in (wide, edges):
        compiled = cc.compile(norm)
        torch.testing.assert_close(compiled(x, w, b), norm(x, w, b), equal_nan=True)
        assert any(n.startswith("welford") for k in compiled.session.kernels for n in k.plan.notes)

    def stats(x):
        var, mean = torch.var_mean(x.float(), -1, correction=0)
        return var, mean, torch.std(x.float(), -1)

    compiled = cc.compile(stats)
    got, expected = compiled(edges), stats(edges)
    torch.testing.assert_close(got[0], expected[0], equal_nan=True)
    torch.testing.assert_close(got[2], expected[2], equal_nan=True)
    finite = [r for r in range(8) if r not in INF_ROWS]  # eager's var_mean gives an inf row a NaN mean
    torch.testing.assert_close(got[1][finite], expected[1][finite], equal_nan=True)
    assert any(n.startswith("welford") for k in compiled.session.kernels for n in k.plan.notes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_erf_and_gelu_use_libdevice_on_the_gpu_and_match_eager(dtype):
    """On a GPU erf is libdevice's (faster than the interpreter's polynomial in memory-bound kernels):
    erf over a wide range with infinities and NaN, and GELU with its gradient, against eager."""
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan")])
    x = torch.cat([torch.linspace(-8, 8, 100_000), special]).to("cuda", dtype)
    compiled = cc.compile(torch.erf)
    torch.testing.assert_close(compiled(x), torch.erf(x), equal_nan=True)
    (kernel,) = compiled.session.kernels
    assert "tl.erf(" in kernel.source and "_erf_f32(" not in kernel.source, kernel.source
    h = torch.randn(64, 1024, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn_like(h)
    gelu = cc.compile(lambda t: F.gelu(t))
    (ours,) = torch.autograd.grad(gelu(h), h, g)
    (expected,) = torch.autograd.grad(F.gelu(h), h, g)
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_convolutions_bias_joins_the_kernel_after_it_on_the_gpu(dtype):
    # ATen adds a cuDNN convolution's bias in a pass of its own (SegFormer's depthwise convolution:
    # 40 us of add on the H200); ours calls the convolution without it and adds it in the GELU kernel.
    from torch.profiler import ProfilerActivity, profile

    from compiler_core.schedule.epilogues import CONVOLUTION

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(256, 256, 3, padding=1, groups=256).cuda().to(dtype).eval()
    x = torch.randn(8, 256, 56, 56, device="cuda", dtype=dtype)

    def block(x):
        return F.gelu(conv(x))

    compiled = cc.compile(block)
    with torch.no_grad():
        got, want = compiled(x), block(x)
        torch.testing.assert_close(got, want, **({"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}))
        convs = [n for g in compiled.session.graphs for n in g.loops.nodes
                 if n.kind == "extern" and n.extern.target == CONVOLUTION]
        assert [n.extern.args[2] for n in convs] == [None]
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            compiled(x)
            torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert not [n for n in names if "elementwise_kernel" in n], names  # no ATen add after the convolution


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_overwriting_scatter_above_the_dense_cap_is_a_store_kernel_on_the_gpu(dtype):
    # A KV-cache-like index_copy and a scatter with distinct positions (with repeats eager CUDA's own
    # result is whichever store lands last): plain stores, values equal to eager's, no fallback.
    g = torch.Generator(device="cuda").manual_seed(0)
    cache = torch.randn(40000, 128, device="cuda", generator=g).to(dtype)
    rows = torch.randperm(40000, device="cuda", generator=g)[:3000]
    new = torch.randn(3000, 128, device="cuda", generator=g).to(dtype)

    def update(cache, rows, new):
        return cache.index_copy(0, rows, new * 2) + 1

    compiled = cc.compile(update)
    assert torch.equal(compiled(cache, rows, new), update(cache, rows, new))
    assert compiled.session.stats["fallback_ops"] == []
    sources = [k.source for k in compiled.session.kernels if k.kind == "scatter"]
    assert sources and all("tl.store(" in s and "atomic" not in s for s in sources), sources
