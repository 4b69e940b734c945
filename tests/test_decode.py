"""Text generation with a key/value cache, as users run it: a prompt, then one token at a time, each
step's keys and values appended to the cache. transformers' DynamicCache grows by concatenation in
Python between calls; its StaticCache is a preallocated tensor per layer that the compiled forward
writes into in place (an input mutation in our graph: the caller's buffer must hold the new rows after
the call, and the next step reads them). Each step's logits are compared with eager's, the tokens
chosen must be the same, and generate() must return the same sequences, with left padding."""

import inspect

import pytest
import torch

import compiler_core as cc

tf = pytest.importorskip("transformers")
pytestmark = pytest.mark.zoo
# transformers 5.x renamed `past_key_values` to `cache`; older 5.x releases take only the old name.
CACHE_ARG = "cache" if "cache" in inspect.signature(tf.LlamaForCausalLM.forward).parameters else "past_key_values"
STEPS = 5


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def _model(name: str):
    tf.logging.set_verbosity_error()
    torch.manual_seed(0)
    common = dict(vocab_size=128, use_cache=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if name == "gpt2":  # eager attention: the cache's keys are concatenated and multiplied by our kernels
        config = tf.GPT2Config(n_positions=64, n_embd=64, n_layer=2, n_head=4, attn_implementation="eager",
                               **common)
        return config, tf.GPT2LMHeadModel(config).eval()
    config = tf.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, max_position_embeddings=64, **common)
    return config, tf.LlamaForCausalLM(config).eval()


def _new_cache(kind: str, config):
    return tf.DynamicCache(config=config) if kind == "dynamic" else tf.StaticCache(config=config, max_cache_len=32)


def _greedy(forward, prompt, cache):
    """The prompt, then STEPS tokens, each the argmax of the last position's logits."""
    tokens, logits, current = prompt, [], prompt
    with torch.no_grad():
        for _ in range(STEPS + 1):
            out = forward(input_ids=current, **{CACHE_ARG: cache}, use_cache=True)
            logits.append(out.logits[:, -1].clone())
            current = logits[-1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, current], 1)
    return tokens, logits


def _layer_tensors(cache) -> list[torch.Tensor]:
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("name,kind,backend", [("llama", "dynamic", "cpp"), ("gpt2", "dynamic", "cpp"),
                                               ("llama", "static", "cpp"), ("llama", "static", "triton")])
def test_greedy_decoding_with_a_cache_matches_eager_step_by_step(name, kind, backend):
    config, model = _model(name)
    prompt = torch.randint(3, 128, (2, 7), generator=torch.Generator().manual_seed(1))
    eager_cache, our_cache = _new_cache(kind, config), _new_cache(kind, config)
    want_tokens, want = _greedy(model, prompt, eager_cache)
    # A dynamic cache grows a row per call: symbolic once its length changes (dynamic=None), as a user
    # generating with it compiles (README); a static one keeps its sizes.
    compiled = cc.compile(model, backend=backend, dynamic=None if kind == "dynamic" else False)
    got_tokens, got = _greedy(compiled, prompt, our_cache)
    for step, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=f"step {step}")
    assert torch.equal(got_tokens, want_tokens)
    # The cache the caller holds has eager's keys and values: a static cache's rows were written in place.
    for a, b in zip(_layer_tensors(our_cache), _layer_tensors(eager_cache), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    stats = compiled.session.stats
    assert stats["fallback_graphs"] == 0 and stats["fallback_ops"] == [], (stats, compiled.session.messages)
    assert stats["kernel_count"] > 0
    if kind == "dynamic":  # one graph with a symbolic length serves every token, not one graph per token
        assert all(g.symbolic for g in compiled.session.graphs), compiled.session.messages


def _generates_as_eager(model, prompt, options) -> None:
    """generate() with the forward compiled (dynamic=None: the cache grows) returns eager's sequences,
    with nothing left to PyTorch."""
    want = model.generate(prompt, **options)
    model.forward = cc.compile(model.forward, backend="cpp", dynamic=None)
    got = model.generate(prompt, **options)
    assert torch.equal(got, want), (got, want)
    stats = model.forward.session.stats
    assert stats["fallback_graphs"] == 0 and stats["fallback_ops"] == [], stats


@pytest.mark.parametrize("cache_implementation", [None, "static"])
def test_generate_with_a_compiled_forward_returns_eagers_sequences(cache_implementation):
    config, model = _model("llama")
    prompt = torch.randint(3, 128, (2, 7), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(prompt)
    mask[0, :3] = 0  # the first prompt is shorter: left padding, a mask the cache's positions must follow
    options = dict(max_new_tokens=6, do_sample=False, attention_mask=mask,
                   **({"cache_implementation": cache_implementation} if cache_implementation else {}))
    _generates_as_eager(model, prompt, options)


class _PositionCache(torch.nn.Module):
    """gpt-fast's and torchtune's cache: `cache[:, :, positions] = new` (index_put after two whole dims)."""

    def __init__(self, length: int = 64, width: int = 16):
        super().__init__()
        self.register_buffer("keys", torch.zeros(2, 4, length, width))
        self.register_buffer("values", torch.zeros(2, 4, length, width))

    def forward(self, positions, k, v, q):
        self.keys[:, :, positions] = k
        self.values[:, :, positions] = v
        return torch.nn.functional.scaled_dot_product_attention(q, self.keys, self.values)


def _cache_steps(module, steps=3):
    outputs = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        k, v, q = (torch.randn(2, 4, 1, 16, generator=g) for _ in range(3))
        outputs.append(module(torch.tensor([step * 5]), k, v, q))
    return outputs


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_a_cache_updated_at_positions_is_written_in_place_not_copied(backend):
    """Each step stores 2x4 new rows; a functional graph would copy both 64-row caches (a full read and
    write of each, then AOTAutograd's copy back: 24x eager's step time at 2,048 rows). The scatter's
    destination is the caller's buffer itself, and no cache-sized buffer is allocated."""
    eager, ours = _PositionCache(), _PositionCache()
    compiled = cc.compile(ours, backend=backend)
    for a, b in zip(_cache_steps(compiled), _cache_steps(eager)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(ours.keys, eager.keys, rtol=0, atol=0)
    torch.testing.assert_close(ours.values, eager.values, rtol=0, atol=0)
    record = compiled.session.graphs[-1]
    inputs = {b.name for b in record.loops.inputs}
    stored_into = [n.destination for n in record.loops.nodes if n.kind == "scatter"]
    assert len(stored_into) == 2 and set(stored_into) <= inputs, stored_into
    cache_bytes = ours.keys.nbytes
    fresh = [r.buffer for r in record.memory.live_ranges if r.nbytes >= cache_bytes and r.storage not in inputs]
    assert fresh == [], fresh
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats


def test_a_cache_read_before_its_update_is_copied_first():
    """The old values are read after the scatter would have stored into them: the update is then made
    in a copy, as before, and the caller's buffer gets it afterwards."""

    class ReadThenWrite(_PositionCache):
        def forward(self, positions, k, v, q):
            before = self.keys.sum(2, keepdim=True)
            self.keys[:, :, positions] = k
            return self.keys * 2 + before

    eager, ours = ReadThenWrite(), ReadThenWrite()
    compiled = cc.compile(ours)
    for a, b in zip(_cache_steps(compiled), _cache_steps(eager)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(ours.keys, eager.keys, rtol=0, atol=0)
    record = compiled.session.graphs[-1]
    inputs = {b.name for b in record.loops.inputs}
    assert all(n.destination not in inputs for n in record.loops.nodes if n.kind == "scatter")


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_after_whole_dims_matches_eager(backend, accumulate):
    """`x[:, :, index] = values` and `+=`: negative positions, repeated ones, a 2-d index tensor and
    values broadcast over the whole dims; on an input and on a value computed in the graph."""

    def fn(x, index, values):
        computed = torch.ops.aten.index_put(x * 2, [None, None, index], values, accumulate)
        flat = torch.ops.aten.index_put(x, [None, None, index.flatten()], values.flatten(1, 2), accumulate)
        return flat, computed

    x = torch.randn(3, 5, 7, 4)
    index = torch.tensor([[0, -1], [3, 3]]) if accumulate else torch.tensor([[0, -1], [3, 5]])
    values = torch.randn(5, 2, 2, 4)  # broadcast over x's first dim
    compiled = cc.compile(fn, backend=backend)
    for a, b in zip(compiled(x, index, values), fn(x, index, values)):
        torch.testing.assert_close(a, b)
    assert compiled.session.stats["fallback_ops"] == [], compiled.session.stats


@pytest.mark.parametrize("name", ["llama", "t5"])
def test_beam_search_with_a_compiled_forward_returns_eagers_sequences(name):
    """Beam search reorders the cache between calls (index_select on every layer's tensors, outside
    the graph); T5 also has an encoder and a cross-attention cache. Llama's uses a static cache."""
    if name == "t5":
        config = tf.T5Config(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                             decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
        torch.manual_seed(0)
        model, extra = tf.T5ForConditionalGeneration(config).eval(), {}
    else:
        _, model = _model("llama")
        extra = {"cache_implementation": "static"}
    prompt = torch.randint(3, 128, (2, 7), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(prompt)
    mask[1, :2] = 0
    options = dict(attention_mask=mask, max_new_tokens=6, num_beams=2, do_sample=False, **extra)
    _generates_as_eager(model, prompt, options)


def _stores(cache, positions, rows):
    cache[:, positions] = rows
    return cache.sum(1)


def _copies_then_reads_other(cache, other, positions, rows):
    cache.index_copy_(1, positions, rows)
    return other * 2


def _copies_and_returns(cache, positions, rows):
    cache.index_copy_(1, positions, rows)
    return cache, cache.t()


@pytest.mark.parametrize("case", ["strided view", "transposed", "passed twice", "returned"])
def test_a_scatter_into_an_input_follows_eager_through_aliases(case):
    """The in-place store into an updated input, where the input is a strided view of a larger tensor,
    a transposed one, the same tensor passed as two arguments (one updated, the other read after the
    update), or returned (and viewed) as well: each call's outputs, and every tensor the caller holds,
    as eager leaves them."""
    positions, rows = torch.tensor([1, 3]), torch.randn(4, 2, generator=torch.Generator().manual_seed(4))

    def make():
        start = torch.arange(48, dtype=torch.float32)
        if case == "strided view":
            base = start.reshape(6, 8)
            return base, (_stores, (base[1:5, ::2], positions, rows))
        if case == "transposed":
            base = start[:20].reshape(5, 4)
            return base, (_stores, (base.t(), positions, rows))
        base = start[:20].reshape(4, 5)
        if case == "passed twice":
            return base, (_copies_then_reads_other, (base, base, positions, rows))
        return base, (_copies_and_returns, (base, positions, rows))

    eager_base, (fn, eager_args) = make()
    our_base, (_, our_args) = make()
    compiled = cc.compile(fn)
    for _ in range(2):  # the second call reads what the first stored
        want, got = fn(*eager_args), compiled(*our_args)
        want, got = (want if isinstance(want, tuple) else (want,)), (got if isinstance(got, tuple) else (got,))
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)  # sums in another order: within rounding
        torch.testing.assert_close(our_base, eager_base, rtol=0, atol=0)  # the stored values exactly
    if case == "returned":
        assert got[0].data_ptr() == our_args[0].data_ptr()  # the caller's tensor, as in eager
    assert compiled.session.stats["fallback_graphs"] == 0
