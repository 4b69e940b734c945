"""Two things training scripts wrap around a model, through cc.compile: mixed precision with
torch.autocast (bf16 on the CPU) and activation checkpointing (transformers'
gradient_checkpointing_enable, torch.utils.checkpoint without reentry). The loss and every gradient
are compared with the same step in eager PyTorch; nothing may run in eager PyTorch instead of our
kernels. (torch.compile with Inductor gives the same differences from eager under autocast: bf16
rounding at other places, about 1e-2 of a gradient's largest element.)"""

import pytest
import torch

import compiler_core as cc

tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.zoo


def _llama():
    tf.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                            pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return tf.LlamaForCausalLM(config)


def _step(model, call, ids, autocast: bool, checkpoint: bool):
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = call(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("autocast,checkpoint", [(True, False), (False, True), (True, True)],
                         ids=["autocast-bf16", "checkpointing", "both"])
def test_a_training_step_with_autocast_or_checkpointing_matches_eager(autocast, checkpoint):
    ids = torch.randint(3, 128, (2, 16), generator=torch.Generator().manual_seed(1))
    eager = _llama()
    want_loss, want = _step(eager, eager, ids, autocast, checkpoint)
    ours = _llama()
    compiled = cc.compile(ours)
    loss, got = _step(ours, compiled, ids, autocast, checkpoint)
    tol = 2e-2 if autocast else 1e-5  # relative to the gradient's largest element
    torch.testing.assert_close(loss, want_loss, rtol=tol, atol=0)
    for name, grad in want.items():
        worst = (got[name] - grad).abs().max() / grad.abs().max().clamp_min(1e-12)
        assert worst <= tol, (name, worst.item())
    stats = compiled.session.stats  # every graph of the one call (checkpointing breaks the model into several)
    assert stats["fallback_graphs"] == 0 and stats["fallback_ops"] == [] and stats["kernel_count"] > 0, stats
    if autocast:  # the matmuls ran in bf16, as autocast asks
        dtypes = {n.output.dtype for g in compiled.session.all_records() for n in g.loops.nodes if n.kind == "extern"}
        assert torch.bfloat16 in dtypes, dtypes
