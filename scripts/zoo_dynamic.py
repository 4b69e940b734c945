"""Zoo text models with symbolic sizes at several (batch, sequence) pairs: one line per model and dtype.

`dynamic=True` by default; `--dynamic auto` compiles with None (static first, symbolic on a change).

    PYTHONPATH=. python scripts/zoo_dynamic.py --device cuda --names llama,bert --dtypes fp32,bf16
    PYTHONPATH=. python scripts/zoo_dynamic.py --device cuda --mode training --names gpt2,llama

Each call's outputs (inference) or loss and gradients (training) are judged as the zoo table judges
them (tests/models/check.py): against an fp64 copy of the same weights, within the dtype's tolerance
or within twice the error of eager PyTorch in the run's dtype. The line says whether every graph ran
symbolic kernels, how many compilations served the sizes, how many graphs fell back to eager, and
the worst error over its allowance (ok at <= 1). The CPU tests do the same at small sizes
(tests/test_symbolic.py); this is the GPU's realistic width.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import compiler_core as cc
from tests.models.check import cast_case, compare, named_tensors
from tests.models.table import DTYPES
from tests.models.zoo import SIZES, ZOO, text_inputs_at

# (batch, sequence) pairs per zoo size: the GPU's realistic one, and the CPU tests' small one.
PAIRS = {"large": ((2, 128), (4, 200), (8, 384)), "small": ((2, 6), (3, 11), (2, 9))}


def _outputs(model, inputs: dict, training: bool) -> dict:
    if not training:
        with torch.no_grad():
            out = model(**inputs)
        return {k: v for k, v in named_tensors(out).items() if k in ("out.logits", "out.last_hidden_state")}
    out = model(**inputs)
    out.loss.backward()
    found = {"loss": out.loss.detach()}
    for name, p in model.named_parameters():
        found[name] = p.grad
        p.grad = None
    return found


def run(name: str, dtype: torch.dtype, device: str, size: str, training: bool, dynamic: bool | None) -> str:
    started = time.perf_counter()
    built = ZOO[name].build(size, device, dtype, mask=True)
    reference, eager = cast_case(built, torch.float64), cast_case(built, dtype)
    models = [built.model, reference.model, eager.model]
    for m in models:
        m.train(training)
    config = built.model.config
    compiled = cc.compile(built.model, dynamic=dynamic)
    gen = torch.Generator().manual_seed(0)
    sessions, worst, fell_back = [], 0.0, 0
    for batch, seq in PAIRS[size]:
        drawn = text_inputs_at(built.inputs, batch, seq, SIZES[size].vocab, gen,
                               encoder_decoder=config.is_encoder_decoder)
        inputs = {k: v.to(device) for k, v in drawn.items()}
        if training:
            ids = inputs["decoder_input_ids" if config.is_encoder_decoder else "input_ids"]
            inputs["labels"] = ids.clone()
        ours = _outputs(compiled, inputs, training)
        exact = _outputs(reference.model, inputs, training)
        theirs = _outputs(eager.model, inputs, training)
        verdict = compare(ours, exact, dtype, theirs)
        worst = max(worst, verdict.ratio)
        session = compiled.session
        fell_back = max(fell_back, session.stats["fallback_graphs"])
        if session not in sessions:
            sessions.append(session)
    graphs = [g for s in sessions for g in s.graphs]
    # dynamic=None compiles the first sizes static and the rest symbolic: judge the graphs of the last session.
    judged = graphs if dynamic else list(sessions[-1].graphs)
    symbolic = bool(judged) and all(g.symbolic and (not training or g.backward is None or g.backward.symbolic)
                                    for g in judged)
    guards = max((len(g.size_guards) for g in graphs), default=0)
    # Why a graph was compiled per size (the session says which stage refused symbols).
    why = next((m for s in sessions for m in s.messages if "cannot take yet" in m), "")
    return (f"{name:<10} {str(dtype).removeprefix('torch.'):<9} {'training ' if training else 'inference'} "
            f"symbolic={symbolic} compilations={len(sessions)} fallbacks={fell_back} guards<={guards} "
            f"worst/allowed={worst:.3g} {'ok' if worst <= 1 else 'MISMATCH'} {time.perf_counter() - started:.1f}s"
            + (f"\n    per size because: {why[:400]}" if why else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--names", default="llama,bert,qwen2,gpt_neox,t5")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--size", choices=tuple(PAIRS), help="default: large on cuda, small on cpu")
    parser.add_argument("--mode", choices=("inference", "training"), default="inference")
    parser.add_argument("--dynamic", choices=("true", "auto"), default="true",
                        help="auto: dynamic=None, torch.compile's default (static first, symbols once sizes change)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    size = args.size or ("large" if args.device == "cuda" else "small")
    failed = 0
    for name in args.names.split(","):
        for d in args.dtypes.split(","):
            try:
                line = run(name, DTYPES[d], args.device, size, args.mode == "training",
                           True if args.dynamic == "true" else None)
            except Exception as exc:  # one model's failure must not hide the others' lines
                line = f"{name:<10} {d:<9} {args.mode} ERROR {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            failed += "ok" not in line.split()
            print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
