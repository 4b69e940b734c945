"""The CPU half of the model zoo: every architecture, small and in fp32, inference and one training
step, compared with eager PyTorch on the same weights; no graph may fall back to eager.

`python -m tests.models --device cpu --size small` prints the same runs as a table.
"""

import pytest
import torch

from .check import ZooRun, run_inference, run_training
from .zoo import ZOO

pytestmark = pytest.mark.zoo

# Models with an attention mask run with a padding mask; three of them also without one, where
# transformers takes its other attention path (is_causal SDPA, or no mask tensor at all).
INFERENCE = [pytest.param(e.name, e.takes_mask, id=e.name + ("-mask" if e.takes_mask else "")) for e in ZOO.values()]
INFERENCE += [pytest.param(name, False, id=f"{name}-nomask") for name in ("gpt2", "llama", "bert")]
TRAINING = [pytest.param(e.name, e.takes_mask, id=e.name + ("-mask" if e.takes_mask else "")) for e in ZOO.values()]


def _check(run: ZooRun) -> None:
    why = f"fallbacks: {run.fallbacks}" if run.fallbacks else "no graph fell back"
    assert run.match.ok, f"mismatch with eager: {run.match.describe()} ({why})"
    assert run.session.stats["fallback_graphs"] == 0, f"graphs ran in eager PyTorch: {run.fallbacks}"


@pytest.mark.parametrize("name,mask", INFERENCE)
def test_inference_matches_eager(name, mask):
    _check(run_inference(ZOO[name], "small", "cpu", torch.float32, mask=mask))


@pytest.mark.parametrize("name,mask", TRAINING)
def test_training_step_matches_eager(name, mask):
    # Loss, every parameter's gradient and every floating buffer after one forward + backward.
    _check(run_training(ZOO[name], "small", "cpu", torch.float32, mask=mask))
