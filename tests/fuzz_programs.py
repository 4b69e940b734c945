"""Random tensor programs, compiled and compared with eager PyTorch: the wrong answers no one thought of.

    PYTHONPATH=. python tests/fuzz_programs.py --seeds 0-199              # C++ backend, inference
    PYTHONPATH=. python tests/fuzz_programs.py --seeds 0-99 --train       # gradients of every input too
    PYTHONPATH=. python tests/fuzz_programs.py --seeds 0-99 --dynamic     # a second call at other sizes
    PYTHONPATH=. python tests/fuzz_programs.py --seeds 17 --show          # one program's source
    PYTHONPATH=. python tests/fuzz_programs.py --seeds 17 --minimize      # the fewest lines that still differ
    PYTHONPATH=. python tests/fuzz_programs.py --device cuda --seeds 0-199   # Triton on the GPU

The silent wrong answers of this project came from combinations: a storage handed to two live tensors,
a view of a mutated intermediate, an index with a symbolic offset. A random program mixes views
(transposes, steps, diagonals, unfold, expand), pointwise and reduction ops, in-place updates of
intermediates, of views and of inputs, gathers and scatters, and returns some of its values, inputs and
views included. Each line is run in eager PyTorch while the program is written, so every program is
valid; the compiled function must then give the same outputs, leave the inputs as eager leaves them,
give the same gradients (--train), and keep eager's aliasing: an output is a view of an input exactly
when eager's is, and two outputs share memory only when eager's do.

A program is Python source (`Program.source()`), so a failure is a reproducer to paste; `--minimize`
removes lines while the difference persists. The exit status is the number of failing programs.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

import compiler_core as cc

DIMS = (1, 2, 3, 4, 5, 6, 8)
UNARY = (
    "{a}.tanh()", "torch.sigmoid({a})", "{a}.relu()", "{a}.sin()", "{a} * 0.5", "{a} / (1 + {a}.abs())",
    "torch.exp(-{a}.abs())", "torch.log1p({a}.abs())", "({a}.abs() + 1).sqrt()", "torch.rsqrt({a} * {a} + 1)",
    "F.gelu({a})", "F.silu({a})", "torch.erf({a})", "{a}.clamp(-0.5, 0.5)", "{a}.neg()", "{a} * {a}",
    "torch.where({a} > 0, {a}, {a} * 0.1)", "(3 * {a}).floor()", "{a}.sign()", "{a} - 1", "F.softplus({a})",
    "torch.nan_to_num({a}.log())", "{a}.pow(3)", "1 / ({a} * {a} + 1)",
)
BINARY = (
    "{a} + {b}", "{a} * {b}", "{a} - {b}", "{a} / ({b}.abs() + 1)", "torch.maximum({a}, {b})",
    "torch.minimum({a}, {b})", "torch.where({a} > {b}, {a}, {b})", "torch.atan2({a}, {b})",
    "torch.lerp({a}, {b}, 0.25)", "({a} > {b}).float()", "torch.remainder({a} * 4, {b}.abs() + 0.1)",
    "torch.fmod({a} * 4, {b}.abs() + 0.1)", "torch.floor_divide({a} * 4, {b}.abs() + 0.1)",
)
REDUCE = (
    "{a}.sum({d}, keepdim={k})", "{a}.mean({d}, keepdim={k})", "{a}.amax({d}, keepdim={k})",
    "{a}.amin({d}, keepdim={k})", "{a}.var({d}, keepdim={k})", "torch.logsumexp({a}, {d}, keepdim={k})",
    "{a}.norm(dim={d}, keepdim={k})", "{a}.max({d}, keepdim={k}).values", "{a}.softmax({d})",
    "{a}.log_softmax({d})", "{a}.cumsum({d})", "{a}.argmax({d}, keepdim={k}).float()", "{a}.sum()",
    "{a}.sort({d}).values", "F.normalize({a}, dim={d})", "{a}.prod({d}, keepdim={k})", "{a}.std({d})",
    "{a}.cummax({d}).values", "{a}.any({d}).float()",
)


@dataclass
class Program:
    seed: int
    input_shapes: list[tuple[int, ...]]
    lines: list[str]
    outputs: list[str]
    train: bool = False

    def source(self) -> str:
        names = ", ".join(f"x{i}" for i in range(len(self.input_shapes)))
        body = "\n".join(f"    {line}" for line in self.lines)
        return f"def program({names}):\n{body}\n    return ({', '.join(self.outputs)},)\n"

    def function(self) -> Callable:
        namespace = {"torch": torch, "F": F}
        exec(compile(self.source(), f"<fuzz program {self.seed}>", "exec"), namespace)  # noqa: S102 - our own source
        return namespace["program"]

    def inputs(self, scale: int = 1, device: str = "cpu") -> list[torch.Tensor]:
        """The inputs of a call; scale=2 doubles every size above 1 (a second call for dynamic shapes)."""
        gen = torch.Generator().manual_seed(self.seed)
        return [torch.randn(*(d * scale if d > 1 else d for d in shape), generator=gen).to(device)
                for shape in self.input_shapes]


@dataclass
class _Writer:
    """Writes a program line by line, running each line in eager PyTorch to learn its value's shape."""
    rng: random.Random
    values: dict[str, torch.Tensor] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    train: bool = False

    def pick(self, floating: bool = True) -> Optional[str]:
        names = [n for n, v in self.values.items() if v.is_floating_point() or not floating]
        # later values more often: programs are chains with side branches, not piles of input ops
        return self.rng.choices(names, weights=[1 + i for i in range(len(names))])[0] if names else None

    def try_line(self, line: str, name: Optional[str]) -> bool:
        namespace = {"torch": torch, "F": F, **self.values}
        try:
            with torch.enable_grad() if self.train else torch.no_grad():
                exec(line, namespace)  # noqa: S102 - our own source
            if name is not None:
                value = namespace[name]
                if not isinstance(value, torch.Tensor) or value.numel() == 0 or value.numel() > 4096:
                    return False
                if value.is_floating_point() and not torch.isfinite(value).all():
                    return False
                self.values[name] = value
        except Exception:  # noqa: BLE001 - an invalid line is discarded; its namespace changes are not kept
            return False
        self.lines.append(line)
        return True


def _dim(rng: random.Random, t: torch.Tensor) -> int:
    return rng.randrange(-t.dim(), t.dim()) if t.dim() else 0


def _view_expr(rng: random.Random, a: str, t: torch.Tensor) -> Optional[str]:
    nd = t.dim()
    if nd == 0:
        return f"{a}.reshape(1)"
    d = rng.randrange(nd)
    size = t.shape[d]
    lead = ":, " * d
    choices = [
        lambda: f"{a}.transpose({d}, {rng.randrange(nd)})",
        lambda: f"{a}.permute({', '.join(map(str, rng.sample(range(nd), nd)))})",
        lambda: f"{a}.unsqueeze({rng.randrange(nd + 1)})",
        lambda: f"{a}[{lead}{rng.randrange(size)}:]",
        lambda: f"{a}[{lead}::{rng.choice((2, 3))}]",
        lambda: f"{a}[{lead}{rng.randrange(size)}::2]",
        lambda: f"{a}.select({d}, {rng.randrange(size)})",
        lambda: f"{a}.narrow({d}, {rng.randrange(size)}, 1)",
        lambda: f"{a}.flip({d})",
        lambda: f"{a}.movedim({d}, {rng.randrange(nd)})",
        lambda: f"{a}.contiguous()",
        lambda: f"{a}.reshape(-1)",
        lambda: f"{a}.view(-1)",
        lambda: f"{a}.flatten({d}, {rng.randrange(d, nd)})",
        lambda: f"{a}.split({rng.randint(1, size)}, {d})[0]",
        lambda: f"{a}.chunk(2, {d})[-1]",
        lambda: f"{a}.expand({', '.join(str(rng.choice((2, 3))) if s == 1 else '-1' for s in t.shape)})",
        lambda: f"{a}.repeat({', '.join(str(rng.choice((1, 2))) for _ in t.shape)})",
        lambda: f"{a}.roll({rng.randint(1, 3)}, {d})",
    ]
    if size > 1 and any(size % f == 0 for f in (2, 3)):
        f = 2 if size % 2 == 0 else 3
        choices.append(lambda: f"{a}.unflatten({d}, ({f}, -1))")
    if nd >= 2:
        choices += [lambda: f"{a}.diagonal(0, {d}, {(d + 1) % nd})", lambda: f"{a}.mT",
                    lambda: f"{a}.unfold({d}, {min(size, 2)}, 1)"]
    if 1 in t.shape:
        choices.append(lambda: f"{a}.squeeze({t.shape.index(1)})")
    return rng.choice(choices)()


def _mutation(rng: random.Random, w: _Writer) -> Optional[str]:
    a = w.pick()
    if a is None:
        return None
    t = w.values[a]
    b = w.pick()
    target = a
    if t.dim() and rng.random() < 0.5:  # a view of the value, so the update reaches its base
        d = rng.randrange(t.dim())
        target = f"{a}[{':, ' * d}{rng.randrange(t.shape[d])}:]" if rng.random() < 0.5 else f"{a}.select({d}, 0)"
    choices = [
        f"{target}.add_({b})", f"{target}.mul_(0.5)", f"{target}.clamp_(-1, 1)", f"{target}.copy_({b})",
        f"{target}.masked_fill_({target} > 0.5, 0.0)", f"{target}.sigmoid_()", f"{target}.zero_()",
        f"{target}.addcmul_({b}, {b}, value=0.5)", f"{target}.lerp_({b}, 0.5)",
    ]
    return rng.choice(choices)


def _indexing(rng: random.Random, w: _Writer, name: str) -> Optional[str]:
    a, b = w.pick(), w.pick()
    t = w.values[a]
    if t.dim() == 0:
        return None
    d = rng.randrange(t.dim())
    n = t.shape[d]
    idx = f"(({b}.reshape(-1)[:{rng.randint(1, 6)}] * 7).long() % {n})"
    choices = [
        f"{name} = {a}.index_select({d}, {idx})",
        f"{name} = {a}[{':, ' * d}{idx}]",
        f"{name} = {a}.gather({d}, ({b}.abs() * 5).long().clamp(0, {n - 1}))",
        f"{name} = torch.zeros_like({a}).index_add({d}, {idx}, {a}.narrow({d}, 0, 1).expand("
        f"{', '.join(('-1' if i != d else f'{idx}.numel()') for i in range(t.dim()))}))",
        f"{name} = torch.zeros_like({a}).scatter_add({d}, ({b}.abs() * 5).long().clamp(0, {n - 1}), {b})",
        f"{name} = {a}.masked_fill({b} > 0, -1.0)",
        f"{name} = {a}.index_put(({idx},), {b}.reshape(-1)[:1], accumulate=True)" if d == 0 else None,
    ]
    return rng.choice([c for c in choices if c])


def _combine(rng: random.Random, w: _Writer, name: str) -> Optional[str]:
    a, b = w.pick(), w.pick()
    ta = w.values[a]
    d = _dim(rng, ta)
    choices = [f"{name} = torch.cat([{a}, {b}], {d})", f"{name} = torch.stack([{a}, {b}], {d})",
               f"{name} = {a} @ {b}", f"{name} = {a} @ {b}.mT", f"{name} = torch.outer({a}.reshape(-1)[:8], "
               f"{b}.reshape(-1)[:5])", f"{name} = torch.ones_like({a}).cumsum({d}) * {b}",
               f"{name} = torch.arange({a}.shape[{d}], dtype=torch.float32) + {b}",
               f"{name} = F.layer_norm({a}, {a}.shape[-1:])", f"{name} = {a} * {b}.mean()"]
    return rng.choice(choices)


def generate(seed: int, n_lines: int = 10, train: bool = False) -> Program:
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    shapes = [tuple(rng.choice(DIMS) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
    # the second input often has the first one's shape, or a broadcastable part of it
    if len(shapes) > 1 and rng.random() < 0.6:
        first = shapes[0]
        shapes[1] = tuple(s if rng.random() < 0.7 else 1 for s in first[rng.randrange(len(first)):])
    w = _Writer(rng, train=train)
    for i, shape in enumerate(shapes):
        w.values[f"x{i}"] = torch.randn(*shape, generator=gen).requires_grad_(train)
    counter = 0
    attempts = 0
    while len(w.lines) < n_lines and attempts < 40 * n_lines:
        attempts += 1
        name = f"v{counter}"
        kind = rng.choices(("unary", "binary", "view", "reduce", "mutate", "index", "combine"),
                           weights=(4, 4, 5, 3, 0 if train else 2, 2, 2))[0]
        a = w.pick()
        if a is None:
            break
        if kind == "unary":
            line = f"{name} = " + rng.choice(UNARY).format(a=a)
        elif kind == "binary":
            line = f"{name} = " + rng.choice(BINARY).format(a=a, b=w.pick())
        elif kind == "view":
            expr = _view_expr(rng, a, w.values[a])
            line = f"{name} = {expr}" if expr else None
        elif kind == "reduce":
            t = w.values[a]
            line = f"{name} = " + rng.choice(REDUCE).format(a=a, d=_dim(rng, t), k=rng.random() < 0.5)
        elif kind == "mutate":
            line = _mutation(rng, w)
            name = None
        elif kind == "index":
            line = _indexing(rng, w, name)
        else:
            line = _combine(rng, w, name)
        if line and w.try_line(line, name) and name is not None:
            counter += 1
    produced = [n for n in w.values if n.startswith("v")]
    # every value no later value is computed from is returned (a dead line would test nothing), at most five
    right_sides = [line.partition(" = ")[2] for line in w.lines if re.match(r"v\d+ = ", line)]
    sinks = [n for n in produced if not any(re.search(rf"\b{n}\b", rhs) for rhs in right_sides)]
    outputs = (produced[-1:] + [n for n in reversed(sinks) if n != produced[-1]])[:5] if produced else []
    if rng.random() < 0.2:
        outputs.append(rng.choice([n for n in w.values if n.startswith("x")]))
    return Program(seed, shapes, w.lines, outputs or ["x0"], train)


@dataclass(frozen=True)
class Verdict:
    program: Program
    status: str  # "ok", "MISMATCH", "RAISES", "invalid" (eager itself failed), "fell back"
    detail: str = ""
    # Triton on the CPU: the kernel plans the GPU would print (gpu_source_errors compiles them for sm_90)
    triton_plans: tuple = ()

    def pretty(self) -> str:
        return f"seed {self.program.seed:5d}  {self.status:9} {self.detail}"


def _run(fn: Callable, inputs: list[torch.Tensor], train: bool):
    """Outputs, inputs after the call, gradients of the float inputs."""
    args = [x.clone().requires_grad_(train) for x in inputs]
    with torch.enable_grad() if train else torch.no_grad():
        outs = fn(*args)
        grads: list = []
        if train:
            floats = [o for o in outs if o.requires_grad]
            if floats:
                # Weights of both signs that do not sum to 0: with a zero sum, an output of equal
                # elements (a broadcast) has an exactly-zero gradient, a cancellation of large terms
                # that eager's summation order happened to make exact and ours left at rounding size
                # (seed 5062: 1e4 beside terms of 1e10; eager and float64 both 0).
                loss = sum((o * torch.linspace(-1, 2, o.numel(), device=o.device).reshape(o.shape)).sum()
                           for o in floats)
                grads = list(torch.autograd.grad(loss, args, allow_unused=True))
    return list(outs), args, grads


def _run_in_float64(fn: Callable, inputs: list[torch.Tensor], train: bool) -> Any:
    """_run with float inputs (and tensors the program makes) in float64; None where that fails or
    changes what the program returns."""
    wide = [x.double() if x.is_floating_point() else x for x in inputs]
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return _run(fn, wide, train)
    except Exception:  # noqa: BLE001 - no float64 reference: the float32 comparison stands
        return None
    finally:
        torch.set_default_dtype(previous)


def _close(a: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.allclose(b.detach().double(), a.detach().double(), rtol=1e-4, atol=1e-4, equal_nan=True)


def _as_accurate_as_eager(e: Optional[torch.Tensor], g: Optional[torch.Tensor], p: Any) -> bool:
    """Where eager's float32 value is itself far from the float64 one (an ill-conditioned output: a
    normalised zero vector's gradient is 1/eps times a difference of rounding errors), ours passes if
    it is as near the float64 value as eager's is (within 4x eager's largest error, or 1e-4 relative)."""
    if not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in (e, g, p)) or e.shape != p.shape:
        return False
    precise = p.detach().double()
    eager_error = (e.detach().double() - precise).abs().nan_to_num(0).max()
    ours_error = (g.detach().double() - precise).abs()
    bound = 4 * eager_error + 1e-4 * (1 + precise.abs())
    return bool(((ours_error <= bound) | (g.isnan() & precise.isnan())).all())


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0 or b.numel() == 0 or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    span = lambda t: (t.storage_offset(), t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())))  # noqa: E731
    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 <= b1 and b0 <= a1


def _aliasing(outs: list, args: list) -> list[tuple]:
    pairs = []
    everything = [*outs, *args]
    for i in range(len(outs)):
        for j in range(i + 1, len(everything)):
            pairs.append((i, j, _shares_memory(outs[i], everything[j])))
    return pairs


def _compare(expected, got, call: str, precise: Any = None) -> Optional[str]:
    """The first difference between eager's run and ours, or None. `precise`: eager's run in float64,
    which forgives an output whose float32 values eager itself cannot pin down (_as_accurate_as_eager)."""
    (e_out, e_args, e_grads), (g_out, g_args, g_grads) = expected, got
    p_out, p_args, p_grads = precise if precise is not None else ([None] * len(e_out), [None] * len(e_args),
                                                                   [None] * len(e_grads))
    for kind, es, gs, ps in (("output", e_out, g_out, p_out), ("input after the call", e_args, g_args, p_args),
                             ("gradient of input", e_grads, g_grads, p_grads)):
        for i, (e, g, p) in enumerate(zip(es, gs, ps)):
            if not _close(e, g) and not _as_accurate_as_eager(e, g, p):
                worst = ""
                if e is not None and g is not None and e.shape == g.shape:
                    error = (e.detach().double() - g.detach().double()).abs().nan_to_num(1e9)
                    worst = f" (max error {error.max():.3g})"
                return f"{call}: {kind} {i} differs{worst}"
    for (i, j, e_alias), (_, _, g_alias) in zip(_aliasing(e_out, e_args), _aliasing(g_out, g_args)):
        if e_alias != g_alias:
            other = f"output {j}" if j < len(e_out) else f"input {j - len(e_out)}"
            return f"{call}: output {i} {'shares' if g_alias else 'does not share'} memory with {other} (eager: " \
                   f"{'shares' if e_alias else 'does not'})"
    return None


def check(program: Program, backend: str = "cpp", dynamic: bool = False, debug: str = "",
          device: str = "cpu") -> Verdict:
    """One program compiled for `backend` ("triton" with device="cuda" on a GPU) against eager."""
    fn = program.function()
    calls = [("call 1", program.inputs(device=device))]
    if dynamic:
        calls.append(("call 2 (larger sizes)", program.inputs(scale=2, device=device)))
    torch._dynamo.reset()
    compiled = cc.compile(program.function(), backend=backend, debug=debug)
    for call, inputs in calls:
        try:
            expected = _run(fn, inputs, program.train)
        except Exception as exc:  # noqa: BLE001 - eager cannot run these sizes: nothing to compare
            if call == "call 1":
                return Verdict(program, "invalid", f"eager raises {type(exc).__name__}")
            continue
        try:
            got = _run(compiled, inputs, program.train)
        except Exception as exc:  # noqa: BLE001 - reported as a failure of ours
            return Verdict(program, "RAISES", f"{call}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        problem = _compare(expected, got, call)
        if problem:  # eager in float64 tells a wrong answer from an output float32 cannot pin down
            problem = _compare(expected, got, call, _run_in_float64(fn, inputs, program.train))
        if problem:
            return Verdict(program, "MISMATCH", problem)
    fell_back = [g for g in compiled.session.all_records() if g.fell_back]
    if fell_back:
        return Verdict(program, "fell back", str(getattr(fell_back[0], "fallback_reason", ""))[:160])
    stats = compiled.session.stats
    plans = _triton_plans(compiled.session) if backend == "triton" and device == "cpu" else ()
    return Verdict(program, "ok", f"kernels={stats['kernel_count']} graphs={stats['graphs']}", plans)


def _triton_plans(session) -> tuple:
    from compiler_core.codegen.wrapper import kernel_plans_with_passes

    return tuple(plan for rec in session.all_records() if rec.loops is not None and rec.schedule is not None
                 for plan, _ in kernel_plans_with_passes(rec.loops, rec.schedule, rec.memory, "triton"))


def gpu_source_errors(verdicts: list[Verdict]) -> list[str]:
    """The interpreter runs source a GPU's Triton compiler may reject (a float32 literal where libdevice
    wants float64, a splat of a block): compile the ok programs' kernels for an NVIDIA Hopper target, no
    GPU needed, in one child process. Each rejection as `seed N: kernel: error`."""
    from compiler_core.codegen.triton.ahead import compile_for_gpu

    owners = [(v.program.seed, plan) for v in verdicts for plan in v.triton_plans]
    errors = compile_for_gpu([plan for _, plan in owners]) if owners else []
    return [f"seed {seed}: {plan.name}: {error[:300]}" for (seed, plan), error in zip(owners, errors) if error]


def minimize(program: Program, still_fails: Callable[[Program], bool]) -> Program:
    """Removes lines (and outputs) one at a time while the program still fails the same way."""
    best = program
    changed = True
    while changed:
        changed = False
        for i in range(len(best.lines)):
            trial = Program(best.seed, best.input_shapes, best.lines[:i] + best.lines[i + 1:], best.outputs, best.train)
            if still_fails(trial):
                best, changed = trial, True
                break
        for i in range(len(best.outputs)):
            if len(best.outputs) > 1:
                trial = Program(best.seed, best.input_shapes, best.lines, best.outputs[:i] + best.outputs[i + 1:],
                                best.train)
                if still_fails(trial):
                    best, changed = trial, True
                    break
    return best


def _seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi or lo) + 1))
    return seeds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0-49", help="e.g. 0-199 or 3,17,40-45")
    parser.add_argument("--lines", type=int, default=10, help="lines per program")
    parser.add_argument("--backend", default="cpp", choices=["cpp", "triton"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: Triton on the GPU")
    parser.add_argument("--train", action="store_true", help="gradients of every input too (no in-place lines)")
    parser.add_argument("--dynamic", action="store_true", help="a second call with every size above 1 doubled")
    parser.add_argument("--debug", default="", help="compile(debug=...), e.g. memory")
    parser.add_argument("--show", action="store_true", help="print each program's source")
    parser.add_argument("--minimize", action="store_true", help="shrink each failing program and print it")
    parser.add_argument("--gpu-source", action="store_true",
                        help="with --backend triton on the CPU: also compile the kernels for an NVIDIA GPU")
    args = parser.parse_args()
    # eager's own remarks on the random lines (std of one element, mT of a 0-d tensor) are not findings
    warnings.filterwarnings("ignore", category=UserWarning, module="<string>")
    if args.device == "cuda":
        args.backend = "triton"
    failures = 0
    counts: dict[str, int] = {}
    verdicts: list[Verdict] = []
    for seed in _seeds(args.seeds):
        program = generate(seed, args.lines, args.train)
        if args.show:
            print(program.source())
        try:
            verdict = check(program, args.backend, args.dynamic, args.debug, args.device)
        except Exception as exc:  # noqa: BLE001 - the harness itself failing on a program is reported too
            verdict = Verdict(program, "RAISES", f"harness: {type(exc).__name__}: {exc}"[:200])
            traceback.print_exc()
        counts[verdict.status] = counts.get(verdict.status, 0) + 1
        verdicts.append(verdict)
        print(verdict.pretty(), flush=True)
        if verdict.status in ("MISMATCH", "RAISES"):
            failures += 1
            if args.minimize:
                def fails_alike(p: Program, status: str = verdict.status) -> bool:
                    return check(p, args.backend, args.dynamic, args.debug, args.device).status == status

                small = minimize(program, fails_alike)
                print(small.source(), flush=True)
    if args.gpu_source:
        rejected = gpu_source_errors(verdicts)
        print("\n".join(f"GPU SOURCE REJECTED {r}" for r in rejected))
        counts["gpu_source_rejected"] = len(rejected)
        failures += len(rejected)
    print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return failures


if __name__ == "__main__":
    sys.exit(main())
