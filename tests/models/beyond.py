"""Architectures beyond the zoo: 27 more `transformers` models, each built tiny from its config, for a
sweep that asks whether real models other than the zoo's compile and match eager.

    python -m tests.models --device cpu --only beyond          # all of them, CPU, fp32
    python -m tests.models --device cpu --only bloom,gemma2     # some

First run on 2026-12-02 (fourteenth session): every output and gradient matched. Seven more on
2026-12-05: Funnel's whole graph then ran in eager (a write-back scatter's strides, fixed) and Mamba's
unrolled scan took 84 s to compile (21 s since). Falcon and StableLM's
training had then run their forward in eager (a kernel-name collision, fixed), and SegFormer, wav2vec2,
HuBERT and MobileViT left ops to PyTorch (since lowered). Falcon, SegFormer and wav2vec2 then joined the
zoo itself. What each builder exercises is said beside it. Unlike the zoo, these have one size (S,
whatever `size` asks for): they are a CPU check of coverage, not a timing table, and they are not part of
`make test` (about 10 minutes for all of them, inference and training, on two cores).
"""

import torch
import transformers as tf

from .zoo import SEED, Size, ZooCase, ZooEntry, _finish, _lm_loss, _random, _seq2seq_inputs, _text_inputs, _with_probes

S = Size(hidden=64, layers=2, heads=4, kv_heads=2, seq=16, batch=2, vocab=1000, image=32, mel_bins=8)
SP = {"bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}


def _clm(cfg, model_cls, device, dtype, mask):
    model = _finish(model_cls(cfg), device, dtype)
    inputs, labels = _text_inputs(S, device, mask, torch.Generator().manual_seed(SEED))
    return ZooCase(model, {**inputs, "labels": labels}, _lm_loss)


def _mlm(model, device, dtype, mask, extra=None):
    inputs, labels = _text_inputs(S, device, mask, torch.Generator().manual_seed(SEED))
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, ::3] = True  # a masked-LM loss on every third token
    labels = labels.masked_fill(~keep, -100)
    return ZooCase(model, {**inputs, **(extra or {}), "labels": labels}, _lm_loss)


def opt(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.OPTConfig(vocab_size=S.vocab, hidden_size=S.hidden, num_hidden_layers=S.layers, ffn_dim=4 * S.hidden,
                       num_attention_heads=S.heads, max_position_embeddings=S.seq, word_embed_proj_dim=32,
                       dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, layerdrop=0.0, use_cache=False,
                       do_layer_norm_before=True, bos_token_id=0, eos_token_id=0, pad_token_id=1)
    return _clm(cfg, tf.OPTForCausalLM, device, dtype, mask)


def gptj(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.GPTJConfig(vocab_size=S.vocab, n_positions=S.seq, n_embd=S.hidden, n_layer=S.layers, n_head=S.heads,
                        rotary_dim=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, **SP)
    return _clm(cfg, tf.GPTJForCausalLM, device, dtype, mask)


def bloom(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.BloomConfig(vocab_size=S.vocab, hidden_size=S.hidden, n_layer=S.layers, n_head=S.heads,
                         hidden_dropout=0.0, attention_dropout=0.0, use_cache=False, **SP)
    return _clm(cfg, tf.BloomForCausalLM, device, dtype, mask)




def phi(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.PhiConfig(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=4 * S.hidden,
                       num_hidden_layers=S.layers, num_attention_heads=S.heads, partial_rotary_factor=0.5,
                       qk_layernorm=True, resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
                       max_position_embeddings=S.seq, use_cache=False, **SP)
    return _clm(cfg, tf.PhiForCausalLM, device, dtype, mask)


def phi3(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.Phi3Config(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                        num_hidden_layers=S.layers, num_attention_heads=S.heads, num_key_value_heads=S.kv_heads,
                        resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, max_position_embeddings=S.seq,
                        use_cache=False, **SP)
    return _clm(cfg, tf.Phi3ForCausalLM, device, dtype, mask)


def gemma2(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # logit soft-capping (attention and final), sliding window every other layer, pre/post norms, (1+w) RMSNorm
    cfg = tf.Gemma2Config(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                          num_hidden_layers=S.layers, num_attention_heads=S.heads, num_key_value_heads=S.kv_heads,
                          head_dim=16, max_position_embeddings=S.seq, sliding_window=6, attn_logit_softcapping=5.0,
                          final_logit_softcapping=3.0, query_pre_attn_scalar=16, attention_dropout=0.0,
                          use_cache=False, attn_implementation="eager", **SP)
    return _clm(cfg, tf.Gemma2ForCausalLM, device, dtype, mask)


def gemma(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.GemmaConfig(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                         num_hidden_layers=S.layers, num_attention_heads=S.heads, num_key_value_heads=1,
                         head_dim=16, max_position_embeddings=S.seq, attention_dropout=0.0, use_cache=False, **SP)
    return _clm(cfg, tf.GemmaForCausalLM, device, dtype, mask)


def stablelm(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.StableLmConfig(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                            num_hidden_layers=S.layers, num_attention_heads=S.heads, num_key_value_heads=S.kv_heads,
                            partial_rotary_factor=0.25, use_qkv_bias=True, qk_layernorm=True,
                            use_parallel_residual=True, hidden_dropout=0.0, attention_dropout=0.0,
                            max_position_embeddings=S.seq, use_cache=False, **SP)
    return _clm(cfg, tf.StableLmForCausalLM, device, dtype, mask)


def llama_rope_mqa(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # llama3 rope scaling, multi-query (1 kv head), eager attention, no tied embeddings, attention bias
    cfg = tf.LlamaConfig(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                         num_hidden_layers=S.layers, num_attention_heads=S.heads, num_key_value_heads=1,
                         max_position_embeddings=S.seq, attention_bias=True, tie_word_embeddings=False,
                         rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8,
                                          "rope_theta": 10000.0},
                         attention_dropout=0.0, use_cache=False, attn_implementation="eager", **SP)
    return _clm(cfg, tf.LlamaForCausalLM, device, dtype, mask)


def albert(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # factorized embedding (32 -> 64), one layer shared by both layers (gradients accumulate)
    cfg = tf.AlbertConfig(vocab_size=S.vocab, embedding_size=32, hidden_size=S.hidden, num_hidden_layers=S.layers,
                          num_attention_heads=S.heads, intermediate_size=2 * S.hidden, max_position_embeddings=S.seq,
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                          pad_token_id=0)
    return _mlm(_finish(tf.AlbertForMaskedLM(cfg), device, dtype), device, dtype, mask)


def deberta_v2(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # disentangled attention (c2p + p2c), log-bucketed relative positions, gather-based
    cfg = tf.DebertaV2Config(vocab_size=S.vocab, hidden_size=S.hidden, num_hidden_layers=S.layers,
                             num_attention_heads=S.heads, intermediate_size=2 * S.hidden,
                             max_position_embeddings=S.seq, relative_attention=True, position_buckets=8,
                             max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                             share_att_key=True, position_biased_input=False, hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0, pad_token_id=0)
    return _mlm(_finish(tf.DebertaV2ForMaskedLM(cfg), device, dtype), device, dtype, mask)


def mobilebert(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # bottlenecks, stacked FFNs, NoNorm (elementwise affine), trigram embedding concat
    cfg = tf.MobileBertConfig(vocab_size=S.vocab, hidden_size=S.hidden, embedding_size=32, intra_bottleneck_size=32,
                              true_hidden_size=32, num_attention_heads=S.heads, num_hidden_layers=S.layers,
                              intermediate_size=S.hidden, num_feedforward_networks=2, max_position_embeddings=S.seq,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    return _mlm(_finish(tf.MobileBertForMaskedLM(cfg), device, dtype), device, dtype, mask)


def electra(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # discriminator: replaced-token detection, BCE-with-logits over the masked positions
    cfg = tf.ElectraConfig(vocab_size=S.vocab, embedding_size=32, hidden_size=S.hidden, num_hidden_layers=S.layers,
                           num_attention_heads=S.heads, intermediate_size=2 * S.hidden, max_position_embeddings=S.seq,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0)
    model = _finish(tf.ElectraForPreTraining(cfg), device, dtype)
    inputs, _ = _text_inputs(S, device, mask, torch.Generator().manual_seed(SEED))
    labels = torch.randint(0, 2, (S.batch, S.seq), generator=torch.Generator().manual_seed(SEED + 3)).to(device)
    return ZooCase(model, {**inputs, "labels": labels}, _lm_loss)


def mpnet(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.MPNetConfig(vocab_size=S.vocab, hidden_size=S.hidden, num_hidden_layers=S.layers,
                         num_attention_heads=S.heads, intermediate_size=2 * S.hidden,
                         max_position_embeddings=S.seq + 2, relative_attention_num_buckets=32,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=1)
    model = _finish(tf.MPNetForMaskedLM(cfg), device, dtype)
    case = _mlm(model, device, dtype, mask)
    if mask:
        case.inputs["input_ids"] = case.inputs["input_ids"].masked_fill(case.inputs["attention_mask"] == 0, 1)
    return case


def clip_text(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.CLIPTextConfig(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                            num_hidden_layers=S.layers, num_attention_heads=S.heads, max_position_embeddings=S.seq,
                            projection_dim=32, attention_dropout=0.0, dropout=0.0, pad_token_id=1, bos_token_id=0,
                            eos_token_id=2)
    model = _finish(tf.CLIPTextModelWithProjection(cfg), device, dtype)
    inputs, _ = _text_inputs(S, device, mask, torch.Generator().manual_seed(SEED))
    return _with_probes(model, inputs, ("last_hidden_state", "text_embeds"), device, dtype)


def clip_vision(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.CLIPVisionConfig(hidden_size=S.hidden, intermediate_size=2 * S.hidden, num_hidden_layers=S.layers,
                              num_attention_heads=S.heads, image_size=S.image, patch_size=8, projection_dim=32,
                              attention_dropout=0.0, dropout=0.0)
    model = _finish(tf.CLIPVisionModelWithProjection(cfg), device, dtype)
    gen = torch.Generator().manual_seed(SEED)
    inputs = {"pixel_values": _random(gen, (S.batch, 3, S.image, S.image), device, dtype)}
    return _with_probes(model, inputs, ("last_hidden_state", "image_embeds"), device, dtype)




def mobilevit(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # inverted residuals (BatchNorm, depthwise), unfold/fold to patches, transformer blocks; BN buffers too
    cfg = tf.MobileViTConfig(image_size=S.image, patch_size=2, hidden_sizes=[16, 24, 32],
                             neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_attention_heads=2,
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
                             num_labels=5)
    model = _finish(tf.MobileViTForImageClassification(cfg), device, dtype)
    gen = torch.Generator().manual_seed(SEED)
    pix = _random(gen, (S.batch, 3, S.image, S.image), device, dtype)
    return ZooCase(model, {"pixel_values": pix, "labels": torch.tensor([1, 3], device=device)}, _lm_loss)


def _audio(device, dtype, n=400):
    gen = torch.Generator().manual_seed(SEED)
    return _random(gen, (S.batch, n), device, dtype)




def hubert_ctc(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # GroupNorm feature extractor, post-norm layers, CTC loss
    cfg = tf.HubertConfig(vocab_size=32, hidden_size=S.hidden, num_hidden_layers=S.layers,
                          num_attention_heads=S.heads, intermediate_size=2 * S.hidden, conv_dim=(32, 32),
                          conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                          num_conv_pos_embedding_groups=4, feat_extract_norm="group", do_stable_layer_norm=False,
                          hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0, feat_proj_dropout=0.0,
                          final_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0, mask_feature_prob=0.0,
                          pad_token_id=0, ctc_loss_reduction="mean")
    model = _finish(tf.HubertForCTC(cfg), device, dtype)
    labels = torch.randint(1, 32, (S.batch, 8), generator=torch.Generator().manual_seed(SEED + 3)).to(device)
    return ZooCase(model, {"input_values": _audio(device, dtype), "labels": labels}, _lm_loss)


def marian(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    # sinusoidal positions, scaled embeddings, swish, final_logits_bias buffer
    cfg = tf.MarianConfig(vocab_size=S.vocab, d_model=S.hidden, encoder_layers=S.layers, decoder_layers=S.layers,
                          encoder_attention_heads=S.heads, decoder_attention_heads=S.heads,
                          encoder_ffn_dim=2 * S.hidden, decoder_ffn_dim=2 * S.hidden, max_position_embeddings=S.seq,
                          dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, use_cache=False,
                          pad_token_id=1, eos_token_id=2, decoder_start_token_id=1, forced_eos_token_id=None)
    model = _finish(tf.MarianMTModel(cfg), device, dtype)
    return ZooCase(model, _seq2seq_inputs(S, device, mask), _lm_loss)


def pegasus(size, device, dtype, mask=True):
    torch.manual_seed(SEED)
    cfg = tf.PegasusConfig(vocab_size=S.vocab, d_model=S.hidden, encoder_layers=S.layers, decoder_layers=S.layers,
                           encoder_attention_heads=S.heads, decoder_attention_heads=S.heads,
                           encoder_ffn_dim=2 * S.hidden, decoder_ffn_dim=2 * S.hidden,
                           max_position_embeddings=S.seq, dropout=0.0, attention_dropout=0.0,
                           activation_dropout=0.0, use_cache=False, pad_token_id=0, eos_token_id=1,
                           decoder_start_token_id=0, forced_eos_token_id=None)
    model = _finish(tf.PegasusForConditionalGeneration(cfg), device, dtype)
    return ZooCase(model, _seq2seq_inputs(S, device, mask), _lm_loss)


def funnel(size, device, dtype, mask=True):
    # pooled sequence (avg_pool2d over tokens), relative positional attention: an in-place *= on a
    # reshaped slice of a permuted einsum (functionalization's slice_scatter write-back)
    torch.manual_seed(SEED)
    cfg = tf.FunnelConfig(vocab_size=S.vocab, block_sizes=[1, 1], d_model=S.hidden, n_head=S.heads, d_head=16,
                          d_inner=2 * S.hidden, hidden_dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                          pad_token_id=0)
    return _mlm(_finish(tf.FunnelForMaskedLM(cfg), device, dtype), device, dtype, mask)


def modernbert(size, device, dtype, mask=True):
    # alternating local/global attention, GeGLU
    torch.manual_seed(SEED)
    cfg = tf.ModernBertConfig(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                              num_hidden_layers=S.layers, num_attention_heads=S.heads, max_position_embeddings=S.seq,
                              attention_dropout=0.0, mlp_dropout=0.0, embedding_dropout=0.0, pad_token_id=0,
                              bos_token_id=0, eos_token_id=0, cls_token_id=0, sep_token_id=0)
    return _mlm(_finish(tf.ModernBertForMaskedLM(cfg), device, dtype), device, dtype, mask)


def xlnet(size, device, dtype, mask=True):
    # two-stream relative attention, relative shifts through reshapes
    torch.manual_seed(SEED)
    cfg = tf.XLNetConfig(vocab_size=S.vocab, d_model=S.hidden, n_layer=S.layers, n_head=S.heads,
                         d_inner=2 * S.hidden, dropout=0.0, use_mems_train=False, mem_len=None, **SP)
    return _clm(cfg, tf.XLNetLMHeadModel, device, dtype, mask)


def esm(size, device, dtype, mask=True):
    # rotary embeddings on a protein vocabulary, token dropout scaling
    torch.manual_seed(SEED)
    cfg = tf.EsmConfig(vocab_size=33, hidden_size=S.hidden, num_hidden_layers=S.layers, num_attention_heads=S.heads,
                       intermediate_size=2 * S.hidden, max_position_embeddings=S.seq + 2, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, position_embedding_type="rotary", pad_token_id=1,
                       mask_token_id=32)
    model = _finish(tf.EsmForMaskedLM(cfg), device, dtype)
    ids = torch.randint(4, 30, (S.batch, S.seq), generator=torch.Generator().manual_seed(SEED)).to(device)
    labels = ids.clone()
    labels[:, 1::3] = -100
    return ZooCase(model, {"input_ids": ids, "labels": labels}, _lm_loss)


def dinov2(size, device, dtype, mask=True):
    # layer scale, interpolated position embeddings
    torch.manual_seed(SEED)
    cfg = tf.Dinov2Config(hidden_size=S.hidden, num_hidden_layers=S.layers, num_attention_heads=S.heads, mlp_ratio=2,
                          image_size=32, patch_size=8, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          drop_path_rate=0.0, num_labels=5)
    model = _finish(tf.Dinov2ForImageClassification(cfg), device, dtype)
    pixels = _random(torch.Generator().manual_seed(SEED), (S.batch, 3, 32, 32), device, dtype)
    return ZooCase(model, {"pixel_values": pixels, "labels": torch.tensor([1, 3]).to(device)}, _lm_loss)


def gemma3(size, device, dtype, mask=True):
    # sliding-window and global layers, q/k norms
    torch.manual_seed(SEED)
    cfg = tf.Gemma3TextConfig(vocab_size=S.vocab, hidden_size=S.hidden, intermediate_size=2 * S.hidden,
                              num_hidden_layers=S.layers, num_attention_heads=S.heads, num_key_value_heads=S.kv_heads,
                              head_dim=16, max_position_embeddings=S.seq, sliding_window=8, use_cache=False, **SP)
    return _clm(cfg, tf.Gemma3ForCausalLM, device, dtype, mask)


def mamba(size, device, dtype, mask=True):
    # selective state space: the scan unrolled by Dynamo over the sequence (no CUDA kernels on the CPU);
    # its compile took 84 s before the scheduler remembered its layout inversions (21 s since)
    torch.manual_seed(SEED)
    cfg = tf.MambaConfig(vocab_size=S.vocab, hidden_size=S.hidden, state_size=8, num_hidden_layers=S.layers,
                         expand=2, conv_kernel=4, use_cache=False, **SP)
    return _clm(cfg, tf.MambaForCausalLM, device, dtype, False)


BEYOND: dict[str, ZooEntry] = {
    e.name: e
    for e in (
        ZooEntry("opt", opt, takes_mask=True),
        ZooEntry("gptj", gptj, takes_mask=True),
        ZooEntry("bloom", bloom, takes_mask=True),
        ZooEntry("phi", phi, takes_mask=True),
        ZooEntry("phi3", phi3, takes_mask=True),
        ZooEntry("gemma2", gemma2, takes_mask=True),
        ZooEntry("gemma", gemma, takes_mask=True),
        ZooEntry("stablelm", stablelm, takes_mask=True),
        ZooEntry("llama_rope_mqa", llama_rope_mqa, takes_mask=True),
        ZooEntry("albert", albert, takes_mask=True),
        ZooEntry("deberta_v2", deberta_v2, takes_mask=True),
        ZooEntry("mobilebert", mobilebert, takes_mask=True),
        ZooEntry("electra", electra, takes_mask=True),
        ZooEntry("mpnet", mpnet, takes_mask=True),
        ZooEntry("clip_text", clip_text, takes_mask=True),
        ZooEntry("clip_vision", clip_vision, takes_mask=False),
        ZooEntry("mobilevit", mobilevit, takes_mask=False),
        ZooEntry("hubert_ctc", hubert_ctc, takes_mask=False),
        ZooEntry("marian", marian, takes_mask=True),
        ZooEntry("pegasus", pegasus, takes_mask=True),
        ZooEntry("funnel", funnel, takes_mask=True),
        ZooEntry("modernbert", modernbert, takes_mask=True),
        ZooEntry("xlnet", xlnet, takes_mask=True),
        ZooEntry("esm", esm, takes_mask=False),
        ZooEntry("dinov2", dinov2, takes_mask=False),
        ZooEntry("gemma3", gemma3, takes_mask=True),
        ZooEntry("mamba", mamba, takes_mask=False),
    )
}
