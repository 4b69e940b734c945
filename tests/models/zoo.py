"""The model zoo: real architectures from `transformers`, built from config objects with random weights.

Nothing is downloaded (no `from_pretrained`): every model is `Model(Config(...))` under a fixed seed,
so the CPU machine, CI and the GPU machine build the same kind of network. A builder returns a
`ZooCase`, the model, its keyword inputs and the loss one training step differentiates:

    case = ZOO["gpt2"].build("small", "cpu", torch.float32, mask=True)
    out = case.model(**case.inputs); case.loss(out).backward()

Every dropout probability is 0 so that eager and compiled runs of one model are deterministic and
their losses and gradients can be compared number for number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
import transformers as tf

from .dlrm import DLRM, sparse_inputs
from .meta_llama import MetaLlama

SEED = 0


@dataclass(frozen=True)
class Size:
    """The shape knobs shared by all models at one size (vision models use `image`, not `seq`)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int  # < heads: grouped-query attention in the Llama-style decoders
    seq: int
    batch: int
    vocab: int
    image: int
    mel_bins: int


SIZES = {
    # CPU tests: the whole zoo has to fit in a few minutes of `make test` on two cores.
    "small": Size(hidden=32, layers=2, heads=4, kv_heads=2, seq=12, batch=2, vocab=97, image=32, mel_bins=8),
    # GPU table: realistic widths and sequence lengths, few layers so one command stays under 10 minutes.
    "large": Size(hidden=768, layers=2, heads=12, kv_heads=4, seq=512, batch=8, vocab=16384, image=224,
                  mel_bins=80),
}


@dataclass(frozen=True)
class ZooCase:
    model: torch.nn.Module
    inputs: dict[str, Any]  # keyword arguments of model.forward
    loss: Callable[[Any], torch.Tensor]  # model output -> scalar, what a training step differentiates


@dataclass(frozen=True)
class ZooEntry:
    name: str
    build: Callable[..., ZooCase]  # build(size, device, dtype, mask=...)
    takes_mask: bool  # has an attention_mask input; the others ignore `mask`


def _random(gen: torch.Generator, shape: tuple, device, dtype) -> torch.Tensor:
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def _text_inputs(s: Size, device, mask: bool, gen: torch.Generator) -> tuple[dict, torch.Tensor]:
    """input_ids, and (with `mask`) a padding mask: the second sequence is right-padded by a third.

    Right padding keeps at least one unmasked key in every causal row, so no softmax row is all -inf.
    """
    ids = torch.randint(1, s.vocab, (s.batch, s.seq), generator=gen)
    attention = torch.ones(s.batch, s.seq, dtype=torch.long)
    if mask:
        attention[1, s.seq - s.seq // 3:] = 0
    inputs = {"input_ids": ids.to(device)}
    if mask:
        inputs["attention_mask"] = attention.to(device)
    # Labels for the LM heads: padded positions are ignored (-100) as a real data collator does.
    labels = ids.masked_fill(attention == 0, -100).to(device)
    return inputs, labels


def text_inputs_at(case_inputs: dict, batch: int, seq: int, vocab: int, gen: torch.Generator, *,
                   encoder_decoder: bool) -> dict:
    """A text case's integer inputs drawn again at another (batch, seq), on the CPU.

    ids, padding masks (the last sequence right-padded by a third) and token types; labels are left to
    the caller. An encoder-decoder also gets decoder ids, two shorter than the source; a decoder-only
    model gets none (its **kwargs would swallow them unnoticed).
    """
    out = {}
    for key, value in case_inputs.items():
        if key == "labels" or not (isinstance(value, torch.Tensor) and value.dtype == torch.long):
            continue
        if "token_type" in key:
            out[key] = torch.zeros(batch, seq, dtype=torch.long)
        elif "mask" in key:
            out[key] = torch.ones(batch, seq, dtype=torch.long)
            out[key][-1, seq - seq // 3:] = 0
        else:
            out[key] = torch.randint(1, vocab, (batch, seq), generator=gen)
    if encoder_decoder and "decoder_input_ids" not in out:
        out["decoder_input_ids"] = torch.randint(1, vocab, (batch, max(seq - 2, 2)), generator=gen)
    return out


def _probe_loss(fields: tuple[str, ...], probes: dict[str, torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    """Loss for models without a head: a fixed random weighting of the named outputs, so every output
    element gets its own gradient (a plain sum or mean would hide a permuted or transposed result)."""

    def loss(out):
        return sum(_weighted_mean(getattr(out, f), probes[f]) for f in fields)

    return loss


def _weighted_mean(value: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    # At least fp32 (a bf16 mean of 3M terms loses the loss), and fp64 for the fp64 reference run.
    acc = torch.promote_types(value.dtype, torch.float32)
    return (value.to(acc) * weight.to(acc)).mean()


def _with_probes(model: torch.nn.Module, inputs: dict, fields: tuple[str, ...], device, dtype) -> ZooCase:
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        out = model(**inputs)
    probes = {f: _random(gen, tuple(getattr(out, f).shape), device, dtype) for f in fields}
    return ZooCase(model, inputs, _probe_loss(fields, probes))


def _finish(model: torch.nn.Module, device, dtype) -> torch.nn.Module:
    return model.to(device=device, dtype=dtype).eval()


def _lm_loss(out) -> torch.Tensor:
    return out.loss


# Tokens that no builder draws as input (ids start at 1): pad/bos/eos point there, which also keeps
# transformers from warning that GPT-2's default 50256 lies outside a 97-token vocabulary.
_SPECIAL = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}


# ---- text decoders -------------------------------------------------------------------------------

def gpt2(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    # Eager (matmul + softmax) attention, not SDPA: softmax, masking and the causal mask become our
    # kernels instead of one extern call.
    cfg = tf.GPT2Config(vocab_size=s.vocab, n_positions=s.seq, n_embd=s.hidden, n_layer=s.layers, n_head=s.heads,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                        attn_implementation="eager", **_SPECIAL)
    model = _finish(tf.GPT2LMHeadModel(cfg), device, dtype)
    inputs, labels = _text_inputs(s, device, mask, torch.Generator().manual_seed(SEED))
    return ZooCase(model, {**inputs, "labels": labels}, _lm_loss)


def _llama_like(config_cls, model_cls, size: str, device, dtype, mask: bool, **extra) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    cfg = config_cls(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=2 * s.hidden,
                     num_hidden_layers=s.layers, num_attention_heads=s.heads, num_key_value_heads=s.kv_heads,
                     max_position_embeddings=s.seq, attention_dropout=0.0, use_cache=False, **_SPECIAL, **extra)
    model = _finish(model_cls(cfg), device, dtype)
    inputs, labels = _text_inputs(s, device, mask, torch.Generator().manual_seed(SEED))
    return ZooCase(model, {**inputs, "labels": labels}, _lm_loss)


def llama(size: str, device, dtype, mask: bool = True) -> ZooCase:
    # RoPE, RMSNorm, SwiGLU MLP, grouped-query attention (kv_heads < heads), SDPA.
    return _llama_like(tf.LlamaConfig, tf.LlamaForCausalLM, size, device, dtype, mask)


def meta_llama(size: str, device, dtype, mask: bool = True) -> ZooCase:
    # Meta's reference layout (tests/models/meta_llama.py): RoPE in complex numbers, explicit causal mask.
    s = SIZES[size]
    torch.manual_seed(SEED)
    model = _finish(MetaLlama(s.vocab, s.hidden, s.layers, s.heads, s.kv_heads, s.seq), device, dtype)
    model.freqs_cis = model.freqs_cis.to(device)
    inputs, labels = _text_inputs(s, device, False, torch.Generator().manual_seed(SEED))

    def loss(logits: torch.Tensor) -> torch.Tensor:  # next-token prediction
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())

    return ZooCase(model, {"tokens": inputs["input_ids"]}, loss)


def dlrm(size: str, device, dtype, mask: bool = True) -> ZooCase:
    # Recommendation (tests/models/dlrm.py): embedding bags, their pairwise dot products, MLPs.
    s = SIZES[size]
    torch.manual_seed(SEED)
    tables = (s.vocab, s.vocab // 2, s.vocab // 4, s.vocab)
    model = _finish(DLRM(13, tables, width=s.hidden // 2, hidden=s.hidden), device, dtype)
    gen = torch.Generator().manual_seed(SEED)
    batch = s.batch * 4
    ids, offsets = sparse_inputs(batch, tables, per_sample=4, gen=gen, device=device)
    dense = _random(gen, (batch, 13), device, dtype)
    clicks = torch.randint(0, 2, (batch,), generator=gen).to(device=device, dtype=dtype)

    def loss(logits: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits, clicks)

    return ZooCase(model, {"dense": dense, "ids": ids, "offsets": offsets}, loss)


def qwen2(size: str, device, dtype, mask: bool = True) -> ZooCase:
    # Llama's shape plus biases on q/k/v and untied embeddings.
    return _llama_like(tf.Qwen2Config, tf.Qwen2ForCausalLM, size, device, dtype, mask, tie_word_embeddings=False)


def mistral(size: str, device, dtype, mask: bool = True) -> ZooCase:
    # Sliding-window attention: a window shorter than the sequence, so the mask is not plain causal.
    window = SIZES[size].seq // 2
    return _llama_like(tf.MistralConfig, tf.MistralForCausalLM, size, device, dtype, mask, sliding_window=window)


def gpt_neox(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    # Partial rotary (a quarter of each head's dims) and the parallel attention + MLP residual.
    cfg = tf.GPTNeoXConfig(vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=4 * s.hidden,
                           num_hidden_layers=s.layers, num_attention_heads=s.heads, rotary_pct=0.25,
                           max_position_embeddings=s.seq, hidden_dropout=0.0, attention_dropout=0.0,
                           use_cache=False, use_parallel_residual=True, **_SPECIAL)
    model = _finish(tf.GPTNeoXForCausalLM(cfg), device, dtype)
    inputs, labels = _text_inputs(s, device, mask, torch.Generator().manual_seed(SEED))
    return ZooCase(model, {**inputs, "labels": labels}, _lm_loss)


def falcon(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    # Multi-query attention (one key/value head) and attention parallel to the MLP, rotary, no biases.
    # Its many matmuls of one op once shared a kernel name, and horizontal fusion then merged a kernel
    # with one it depends on: the whole forward fell back to eager (fourteenth session).
    cfg = tf.FalconConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=s.layers,
                          num_attention_heads=s.heads, multi_query=True, parallel_attn=True, bias=False,
                          max_position_embeddings=s.seq, hidden_dropout=0.0, attention_dropout=0.0,
                          use_cache=False, **_SPECIAL)
    model = _finish(tf.FalconForCausalLM(cfg), device, dtype)
    inputs, labels = _text_inputs(s, device, mask, torch.Generator().manual_seed(SEED))
    return ZooCase(model, {**inputs, "labels": labels}, _lm_loss)


# ---- text encoders -------------------------------------------------------------------------------

def bert(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    cfg = tf.BertConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=s.layers,
                        num_attention_heads=s.heads, intermediate_size=4 * s.hidden, max_position_embeddings=s.seq,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    model = _finish(tf.BertForMaskedLM(cfg), device, dtype)
    gen = torch.Generator().manual_seed(SEED)
    inputs, labels = _text_inputs(s, device, mask, gen)
    # Masked-LM labels: only every third position is predicted, the rest ignored (-100).
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, ::3] = True
    labels = labels.masked_fill(~keep, -100)
    token_types = (torch.arange(s.seq) >= s.seq // 2).long().expand(s.batch, s.seq).to(device)
    return ZooCase(model, {**inputs, "token_type_ids": token_types, "labels": labels}, _lm_loss)


def roberta(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    # Position ids are computed from the padding (cumsum over non-pad tokens), so pad id 1 is real here.
    cfg = tf.RobertaConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=s.layers,
                           num_attention_heads=s.heads, intermediate_size=4 * s.hidden,
                           max_position_embeddings=s.seq + 2, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0, pad_token_id=1)
    model = _finish(tf.RobertaModel(cfg), device, dtype)
    inputs, _ = _text_inputs(s, device, mask, torch.Generator().manual_seed(SEED))
    if mask:
        inputs["input_ids"] = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, 1)
    return _with_probes(model, inputs, ("last_hidden_state", "pooler_output"), device, dtype)


def distilbert(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    cfg = tf.DistilBertConfig(vocab_size=s.vocab, dim=s.hidden, n_layers=s.layers, n_heads=s.heads,
                              hidden_dim=4 * s.hidden, max_position_embeddings=s.seq, dropout=0.0,
                              attention_dropout=0.0, pad_token_id=0)
    model = _finish(tf.DistilBertModel(cfg), device, dtype)
    inputs, _ = _text_inputs(s, device, mask, torch.Generator().manual_seed(SEED))
    return _with_probes(model, inputs, ("last_hidden_state",), device, dtype)


def fnet(size: str, device, dtype, mask: bool = True) -> ZooCase:
    # Token mixing by a 2-D Fourier transform instead of attention (`torch.fft.fftn(...).real`): FFTs
    # on complex values run in PyTorch, the real parts and everything around them in our kernels.
    s = SIZES[size]
    torch.manual_seed(SEED)
    cfg = tf.FNetConfig(vocab_size=s.vocab, hidden_size=s.hidden, num_hidden_layers=s.layers,
                        intermediate_size=4 * s.hidden, max_position_embeddings=s.seq, hidden_dropout_prob=0.0,
                        use_tpu_fourier_optimizations=False, pad_token_id=0)
    model = _finish(tf.FNetModel(cfg), device, dtype)
    inputs, _ = _text_inputs(s, device, False, torch.Generator().manual_seed(SEED))
    return _with_probes(model, inputs, ("last_hidden_state", "pooler_output"), device, dtype)


# ---- encoder-decoders ----------------------------------------------------------------------------

def _seq2seq_inputs(s: Size, device, mask: bool) -> dict:
    inputs, _ = _text_inputs(s, device, mask, torch.Generator().manual_seed(SEED))
    # Targets half as long as the source; the model shifts them right itself to make decoder inputs.
    labels = torch.randint(1, s.vocab, (s.batch, s.seq // 2), generator=torch.Generator().manual_seed(SEED + 2))
    return {**inputs, "labels": labels.to(device)}


def t5(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    # Relative position buckets, RMS-style layer norm without bias, gated-GELU feed-forward.
    cfg = tf.T5Config(vocab_size=s.vocab, d_model=s.hidden, d_kv=s.hidden // s.heads, d_ff=2 * s.hidden,
                      num_layers=s.layers, num_decoder_layers=s.layers, num_heads=s.heads,
                      relative_attention_num_buckets=8, dropout_rate=0.0, feed_forward_proj="gated-gelu",
                      use_cache=False, pad_token_id=0, eos_token_id=0, decoder_start_token_id=0)
    model = _finish(tf.T5ForConditionalGeneration(cfg), device, dtype)
    return ZooCase(model, _seq2seq_inputs(s, device, mask), _lm_loss)


def bart(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    cfg = tf.BartConfig(vocab_size=s.vocab, d_model=s.hidden, encoder_layers=s.layers, decoder_layers=s.layers,
                        encoder_attention_heads=s.heads, decoder_attention_heads=s.heads,
                        encoder_ffn_dim=2 * s.hidden, decoder_ffn_dim=2 * s.hidden, max_position_embeddings=s.seq,
                        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                        forced_eos_token_id=None)
    model = _finish(tf.BartForConditionalGeneration(cfg), device, dtype)
    return ZooCase(model, _seq2seq_inputs(s, device, mask), _lm_loss)


# ---- vision and audio ----------------------------------------------------------------------------

def _pixels(s: Size, device, dtype) -> dict:
    gen = torch.Generator().manual_seed(SEED)
    return {"pixel_values": _random(gen, (s.batch, 3, s.image, s.image), device, dtype)}


def vit(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    cfg = tf.ViTConfig(hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
                       intermediate_size=4 * s.hidden, image_size=s.image, patch_size=s.image // 8 if size == "small"
                       else 16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = _finish(tf.ViTModel(cfg), device, dtype)
    return _with_probes(model, _pixels(s, device, dtype), ("last_hidden_state", "pooler_output"), device, dtype)


def resnet(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    # Basic blocks on small, bottlenecks (ResNet-50's block) on large; BatchNorm updates its running
    # statistics in the training step, which the tests compare too.
    small = size == "small"
    cfg = tf.ResNetConfig(embedding_size=16 if small else 64, hidden_sizes=[16, 32] if small else [256, 512, 1024],
                          depths=[1, 1] if small else [1, 1, 1], layer_type="basic" if small else "bottleneck")
    model = _finish(tf.ResNetModel(cfg), device, dtype)
    return _with_probes(model, _pixels(s, device, dtype), ("last_hidden_state", "pooler_output"), device, dtype)


def convnext(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    small = size == "small"
    # Depthwise 7x7 convolutions, channels-last LayerNorm, layer scale. The default layer-scale init
    # (1e-6) would make every block's contribution invisible in the output; 0.5 keeps it measurable.
    cfg = tf.ConvNextConfig(num_stages=2 if small else 3, hidden_sizes=[16, 32] if small else [96, 192, 384],
                            depths=[1, 1] if small else [1, 1, 1], image_size=s.image, drop_path_rate=0.0,
                            layer_scale_init_value=0.5)
    model = _finish(tf.ConvNextModel(cfg), device, dtype)
    return _with_probes(model, _pixels(s, device, dtype), ("last_hidden_state", "pooler_output"), device, dtype)


def swin(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    small = size == "small"
    # Shifted windows: roll, window partition/merge (views of views) and a relative position bias table.
    cfg = tf.SwinConfig(image_size=s.image, patch_size=4, embed_dim=16 if small else 96, depths=[2, 1],
                        num_heads=[2, 4] if small else [3, 6], window_size=4 if small else 7,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0)
    model = _finish(tf.SwinModel(cfg), device, dtype)
    return _with_probes(model, _pixels(s, device, dtype), ("last_hidden_state", "pooler_output"), device, dtype)


def whisper_encoder(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    frames = 2 * s.seq  # the second convolution has stride 2: `seq` positions reach the transformer
    cfg = tf.WhisperConfig(d_model=s.hidden, encoder_layers=s.layers, encoder_attention_heads=s.heads,
                           encoder_ffn_dim=4 * s.hidden, num_mel_bins=s.mel_bins, max_source_positions=s.seq,
                           dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    model = _finish(tf.models.whisper.modeling_whisper.WhisperEncoder(cfg), device, dtype)
    gen = torch.Generator().manual_seed(SEED)
    inputs = {"input_features": _random(gen, (s.batch, s.mel_bins, frames), device, dtype)}
    return _with_probes(model, inputs, ("last_hidden_state",), device, dtype)


def wav2vec2(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    small = size == "small"
    # A convolutional feature encoder with LayerNorm, a weight-normed grouped positional convolution
    # (weight norm's forward and backward) and pre-norm transformer layers. The raw audio is as long
    # as makes `seq` frames after the two strided convolutions.
    cfg = tf.Wav2Vec2Config(hidden_size=s.hidden, num_hidden_layers=s.layers, num_attention_heads=s.heads,
                            intermediate_size=2 * s.hidden, conv_dim=(32, 32) if small else (512, 512),
                            conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16 if small else 128,
                            num_conv_pos_embedding_groups=4 if small else 16, feat_extract_norm="layer",
                            do_stable_layer_norm=True, hidden_dropout=0.0, activation_dropout=0.0,
                            attention_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
                            mask_time_prob=0.0, mask_feature_prob=0.0)
    model = _finish(tf.Wav2Vec2Model(cfg), device, dtype)
    gen = torch.Generator().manual_seed(SEED)
    inputs = {"input_values": _random(gen, (s.batch, 10 * s.seq + 10), device, dtype)}
    return _with_probes(model, inputs, ("last_hidden_state", "extract_features"), device, dtype)


def segformer(size: str, device, dtype, mask: bool = True) -> ZooCase:
    s = SIZES[size]
    torch.manual_seed(SEED)
    small = size == "small"
    # Overlapping patch embeddings, spatial-reduction attention, depthwise-convolution MLPs, and the
    # decode head's bilinear upsampling to the labels' size with a per-pixel cross-entropy (the
    # upsample's backward scatters into trailing dims; 2-d nll_loss).
    cfg = tf.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                             hidden_sizes=[16, 32] if small else [64, 128], patch_sizes=[7, 3], strides=[4, 2],
                             num_attention_heads=[1, 2], mlp_ratios=[2, 2] if small else [4, 4],
                             decoder_hidden_size=32 if small else 256, num_labels=5 if small else 19,
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                             drop_path_rate=0.0)
    model = _finish(tf.SegformerForSemanticSegmentation(cfg), device, dtype)
    gen = torch.Generator().manual_seed(SEED)
    pixels = _random(gen, (s.batch, 3, s.image, s.image), device, dtype)
    labels = torch.randint(0, cfg.num_labels, (s.batch, s.image, s.image), generator=gen)
    return ZooCase(model, {"pixel_values": pixels, "labels": labels.to(device)}, _lm_loss)


ZOO: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry("gpt2", gpt2, takes_mask=True),
        ZooEntry("llama", llama, takes_mask=True),
        ZooEntry("meta_llama", meta_llama, takes_mask=False),
        ZooEntry("qwen2", qwen2, takes_mask=True),
        ZooEntry("mistral", mistral, takes_mask=True),
        ZooEntry("gpt_neox", gpt_neox, takes_mask=True),
        ZooEntry("falcon", falcon, takes_mask=True),
        ZooEntry("bert", bert, takes_mask=True),
        ZooEntry("roberta", roberta, takes_mask=True),
        ZooEntry("distilbert", distilbert, takes_mask=True),
        ZooEntry("fnet", fnet, takes_mask=False),
        ZooEntry("dlrm", dlrm, takes_mask=False),
        ZooEntry("t5", t5, takes_mask=True),
        ZooEntry("bart", bart, takes_mask=True),
        ZooEntry("vit", vit, takes_mask=False),
        ZooEntry("resnet", resnet, takes_mask=False),
        ZooEntry("convnext", convnext, takes_mask=False),
        ZooEntry("swin", swin, takes_mask=False),
        ZooEntry("whisper_encoder", whisper_encoder, takes_mask=False),
        ZooEntry("wav2vec2", wav2vec2, takes_mask=False),
        ZooEntry("segformer", segformer, takes_mask=False),
    )
}


# ---- GPU-table extras: torchvision and timm ------------------------------------------------------
# Not in the CPU tests: torchvision and timm need a torch build they match, which the GPU machine
# has and the CPU machine's torch 2.13 does not. A builder raises ImportError where they are missing.

def _classifier_case(model: torch.nn.Module, size: str, device, dtype) -> ZooCase:
    s = SIZES[size]
    model = _finish(model, device, dtype)
    inputs = {"x": _random(torch.Generator().manual_seed(SEED), (s.batch, 3, s.image, s.image), device, dtype)}
    with torch.no_grad():
        logits_shape = tuple(model(**inputs).shape)
    probe = _random(torch.Generator().manual_seed(SEED + 1), logits_shape, device, dtype)
    return ZooCase(model, inputs, lambda out: _weighted_mean(out, probe))


def torchvision_resnet18(size: str, device, dtype, mask: bool = True) -> ZooCase:
    import torchvision

    torch.manual_seed(SEED)
    return _classifier_case(torchvision.models.resnet18(weights=None), size, device, dtype)


def torchvision_resnet50(size: str, device, dtype, mask: bool = True) -> ZooCase:
    import torchvision

    torch.manual_seed(SEED)
    return _classifier_case(torchvision.models.resnet50(weights=None), size, device, dtype)


def timm_efficientnet_b0(size: str, device, dtype, mask: bool = True) -> ZooCase:
    import timm

    torch.manual_seed(SEED)
    # Depthwise convolutions, SiLU, squeeze-and-excitation; drop rates 0 for determinism.
    model = timm.create_model("efficientnet_b0", pretrained=False, drop_rate=0.0, drop_path_rate=0.0)
    return _classifier_case(model, size, device, dtype)


EXTRA: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry("tv_resnet18", torchvision_resnet18, takes_mask=False),
        ZooEntry("tv_resnet50", torchvision_resnet50, takes_mask=False),
        ZooEntry("timm_efficientnet_b0", timm_efficientnet_b0, takes_mask=False),
    )
}
