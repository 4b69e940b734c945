"""How far one zoo gradient moves with fp32 rounding alone, on the GPU: eager fp32 training steps of the
same model with every weight multiplied by 1 + u*eps (u uniform in [-1, 1], seeded; NUDGES runs),
and ours with the heuristic launch configs and then random ones from each kernel's tuning space
(CONFIGS runs). Prints each run's max error and RMSE from fp64 on TARGET, and the root-sum-square of
the RMSE over all tensors. Run from the repository root on the GPU machine:

    PYTHONPATH=$PWD NUDGES=20 CONFIGS=2 python tools/gpu_checks/fp32_spread.py resnet

(`DEV=cpu SIZE=small` tries the script itself on the CPU.) The zoo's second look (tests/models/check.py)
uses such nudged runs as eager's error envelope."""
import copy
import os
import random
import sys

import torch

sys.path.insert(0, ".")
import compiler_core as cc  # noqa: E402
from compiler_core import api  # noqa: E402
from tests.models.check import _cases, _error, train_step  # noqa: E402
from tests.models.zoo import ZOO  # noqa: E402

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
name = sys.argv[1] if len(sys.argv) > 1 else "resnet"
size, device = os.environ.get("SIZE", "large"), os.environ.get("DEV", "cuda")
ref, eager, case = _cases(ZOO[name], size, device, torch.float32, False)
expected = train_step(ref.model, ref.model, ref)
names = [n for n, r in expected.items() if r is not None]
TARGET = os.environ.get("TARGET", "grad:encoder.stages.2.layers.0.layer.2.convolution.weight")
TARGET = TARGET if TARGET in expected else names[-3]


def nudged(model, seed):
    m = copy.deepcopy(model)
    g = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            u = (torch.rand(p.shape, generator=g) * 2 - 1).to(p.device)
            p.mul_(1 + u * torch.finfo(p.dtype).eps)
    return m


def line(label, d):
    m, _, rm = _error(d[TARGET], expected[TARGET])
    tot = sum(_error(d[n], expected[n])[2] ** 2 for n in names) ** 0.5
    print(f"{label:22s} target max {m:.3g} rmse {rm:.3g} | rss-rmse all {tot:.3g}", flush=True)


pristine = copy.deepcopy(case.model)
m0 = copy.deepcopy(eager.model)
line("eager", train_step(m0, m0, eager))
for seed in range(int(os.environ.get('NUDGES', 4))):
    m = nudged(eager.model, seed)
    line(f"eager nudged {seed}", train_step(m, m, eager))
orig = api.choose_configs
for seed in range(int(os.environ.get('CONFIGS', 4))):
    rnd = random.Random(seed)

    def random_configs(kernels, loaded, graph, rnd=rnd, seed=seed):
        return {k.name: dict(rnd.choice(k.config_space) if seed else k.config_space[0])
                for k in kernels if k.config_space}, ()
    api.choose_configs = random_configs
    torch._dynamo.reset()
    model = copy.deepcopy(pristine)
    line(f"ours configs {seed}" + (" (heuristic)" if not seed else ""), train_step(model, cc.compile(model), case))
