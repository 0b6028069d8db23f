"""The wiring of twist.gemma's swap, checked on the CPU: transformers' Gemma 4 model at the tiny configuration,
with its decoder layers swapped (twist.gemma.swap_decoder_layers) onto a stand-in for the twist kernels that
computes each kernel's op in PyTorch from the kernel's definition (apps/gemma/gemma.h), on the tensors the
swapped layer passes, after checking their shapes against what the exported manifests hold
(twist.gemma.expected_buffers, which test_gemma.py checks against real exports). The swapped model's hidden
states and logits must match the reference model's on the same weights and inputs: prefill, batches, decoding
against a cache longer than the sliding window, and the twist model filling its own cache. This checks which
modules are replaced, argument orders, shapes, dtypes, the cache and the fused norms' hand-over between layers;
the kernels themselves are checked on the GPU (apps/gemma/bench_gemma.py).

Needs torch and transformers with Gemma 4 (transformers.models.gemma4); skips, saying so, without them (CI has
neither)."""
import copy
import sys
from collections import Counter
from pathlib import Path

import pytest

from twist import gemma

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "apps" / "gemma"))
import bench_gemma  # noqa: E402

torch = pytest.importorskip("torch", reason="the swap's wiring test needs PyTorch (not installed here)")
gemma4 = pytest.importorskip("transformers.models.gemma4",
                             reason="the swap's wiring test needs transformers with Gemma 4 (5.x)")
F = torch.nn.functional

# The swapped model must be as close to the exact model (the reference in f32) as transformers' own bf16 model
# is, within this factor: both round to bf16 between kernels, at different points (the stand-in rounds RoPE
# once, PyTorch after each bf16 op), which at these sizes moves the hidden states by about 4% either way; a
# tensor passed to the wrong kernel or a weight applied twice moves them by tens of percent.
SLACK = bench_gemma.SLACK
VOCABULARY = 96


# The names of the kernels' outputs among twist.gemma.expected_buffers' (the rest are their inputs).
OUTPUTS = {"rmsnorm", "out", "out.0", "out.1", "gated"}


def rms_norm(x, weight, eps):
    x = x.float()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * weight.float() if weight is not None else y


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class StandInKernels:
    """What twist.gemma.TwistKernels is to the swapped layers (a config name and call()), computing each kernel
    in PyTorch, in f32 rounded to bf16 where the kernel stores. Counts the calls per kernel."""

    def __init__(self, config: str):
        self.config, self.dims = config, gemma.CONFIGS[config]
        self.calls = Counter()
        self.shapes = {}  # the last LayerShape each (layer type, kernel) was called with

    def call(self, layer, shape, kernel, **tensors):
        expected = gemma.expected_buffers(self.dims, layer, shape)[kernel]
        inputs = set(expected) - OUTPUTS
        assert set(tensors) == inputs, f"{layer} {kernel}: passed {sorted(tensors)}, the kernel takes {sorted(inputs)}"
        for name, tensor in tensors.items():
            assert tuple(tensor.shape) == expected[name], f"{layer} {kernel}: '{name}' is {tuple(tensor.shape)}"
            assert tensor.dtype == torch.bfloat16, f"{layer} {kernel}: '{name}' is {tensor.dtype}"
        self.calls[(layer, kernel)] += 1
        self.shapes[(layer, kernel)] = shape
        out = getattr(self, kernel)(layer, **tensors)
        return tuple(o.to(torch.bfloat16) for o in out) if isinstance(out, tuple) else out.to(torch.bfloat16)

    def input_norm(self, layer, x, w):
        return rms_norm(x, w, self.dims.eps)

    def qkv(self, layer, A, B):
        return A.float() @ B.float()

    o_proj = down_proj = qkv

    def heads(self, layer, x, first_column, count):
        """Heads [first_column / D, + count) of the projection viewed as [B, S, columns / D, D]."""
        d = self.dims.attention(layer)[1]
        return x[:, :, first_column // d:first_column // d + count, :]

    def norm_rope(self, layer, x, first_column, count, w, cos, sin):
        normed = rms_norm(self.heads(layer, x, first_column, count), w, self.dims.eps).to(torch.bfloat16).float()
        cos, sin = cos.float()[:, :, None, :], sin.float()[:, :, None, :]
        return (normed * cos + rotate_half(normed) * sin).transpose(1, 2)

    def q_norm_rope(self, layer, x, w, cos, sin):
        return self.norm_rope(layer, x, 0, self.dims.heads, w, cos, sin)

    def k_norm_rope(self, layer, x, w, cos, sin):
        kv, d, _ = self.dims.attention(layer)
        return self.norm_rope(layer, x, self.dims.heads * d, kv, w, cos, sin)

    def v_norm(self, layer, x):
        kv, d, from_keys = self.dims.attention(layer)
        first = self.dims.heads * d if from_keys else (self.dims.heads + kv) * d
        return rms_norm(self.heads(layer, x, first, kv), None, self.dims.eps).transpose(1, 2)

    def attention(self, layer, Q, K, V):
        group = Q.shape[1] // K.shape[1]
        K, V = K.float().repeat_interleave(group, dim=1), V.float().repeat_interleave(group, dim=1)
        keys, queries = K.shape[2], Q.shape[2]
        position = torch.arange(keys - queries, keys)[:, None]  # the queries are the last positions
        key = torch.arange(keys)[None, :]
        visible = key <= position
        if layer == "sliding":
            visible &= position - key < self.dims.sliding_window
        scores = (Q.float() @ K.transpose(-1, -2)).masked_fill(~visible, float("-inf"))  # scaled by 1
        return torch.softmax(scores, dim=-1) @ V

    def post_attention_norm(self, layer, x, residual, w_post, w_next):
        post = rms_norm(x, w_post, self.dims.eps).to(torch.bfloat16)
        h = (residual.float() + post.float()).to(torch.bfloat16)
        return h, rms_norm(h, w_next, self.dims.eps)

    post_feedforward_norm = post_attention_norm

    def gate_up(self, layer, A, B):
        # B interleaves the gate's and the up's columns; each product is stored in bf16, as PyTorch's are.
        product = (A.float() @ B.float()).to(torch.bfloat16).float()
        return F.gelu(product[:, 0::2], approximate="tanh") * product[:, 1::2]


def relative_l2(got, want):
    got, want = got.float(), want.float()
    return float(torch.linalg.vector_norm(got - want) / torch.linalg.vector_norm(want))


@pytest.fixture(scope="module")
def models():
    """The reference at the tiny configuration with 3 layers (sliding, sliding, full), exact (f32) and in bf16,
    built as the benchmark builds the 31B one (random norm weights too)."""
    return bench_gemma.build_models(3, device="cpu", config="tiny", vocab_size=VOCABULARY)


def swapped(models):
    model = copy.deepcopy(models["bf16"])
    kernels = StandInKernels("tiny")
    gemma.swap_decoder_layers(model, kernels)
    return model, kernels


def assert_as_close_as_bf16(run, models, swapped_model):
    """run(model) -> a tensor; the swapped model's is within SLACK of the bf16 reference's error."""
    exact = run(models["exact"])
    reference_error = relative_l2(run(models["bf16"]), exact)
    error = relative_l2(run(swapped_model), exact)
    assert error <= SLACK * reference_error, f"error {error:.4f} against the exact model, bf16's {reference_error:.4f}"


def layer_calls(kinds=("sliding", "sliding", "full")):
    """What one forward pass of the 3-layer model must call: every kernel of each layer once, but the input norm
    only in the first layer (the others take theirs from the previous layer's post_feedforward_norm)."""
    expected = Counter()
    for index, kind in enumerate(kinds):
        for kernel in gemma.KERNELS:
            if kernel != "input_norm" or index == 0:
                expected[(kind, kernel)] += 1
    return expected


@pytest.mark.parametrize("batch,tokens", [(1, 9), (2, 7)])
def test_prefill_matches_the_reference(models, batch, tokens):
    model, kernels = swapped(models)
    ids = torch.randint(0, VOCABULARY, (batch, tokens), generator=torch.Generator().manual_seed(batch))
    with torch.no_grad():
        assert_as_close_as_bf16(lambda m: m(input_ids=ids, use_cache=False).logits, models, model)
        assert kernels.calls == layer_calls()
        assert_as_close_as_bf16(lambda m: m.model(input_ids=ids, use_cache=False).last_hidden_state, models, model)


def test_decoding_against_a_cache_longer_than_the_window(models):
    """Each model fills its own cache with a prompt of 8 tokens (past the window of 5), the twist one through the
    exact model's cache in bf16, and decodes the next token from it: the sliding layers see the window's 5 keys,
    the full layer all 9."""
    model, kernels = swapped(models)
    prompt = torch.randint(0, VOCABULARY, (2, 8), generator=torch.Generator().manual_seed(3))
    step = torch.randint(0, VOCABULARY, (2, 1), generator=torch.Generator().manual_seed(4))

    def decode(m):
        cache = gemma4.modeling_gemma4.DynamicCache(config=m.config)
        filler = models["exact"] if m is models["exact"] else models["bf16"]
        filler.model(input_ids=prompt, past_key_values=cache, use_cache=True)
        kernels.calls.clear()
        return m(input_ids=step, past_key_values=cache, use_cache=True).logits

    with torch.no_grad():
        assert_as_close_as_bf16(decode, models, model)
    assert kernels.calls == layer_calls()
    assert kernels.shapes[("sliding", "attention")] == gemma.LayerShape("decode", batch=2, keys=5)
    assert kernels.shapes[("full", "attention")] == gemma.LayerShape("decode", batch=2, keys=9)


def test_the_twist_model_fills_its_own_cache_and_decodes_from_it(models):
    model, kernels = swapped(models)
    prompt = torch.randint(0, VOCABULARY, (1, 7), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = models["bf16"].generate(prompt, max_new_tokens=3, do_sample=False)
        got = model.generate(prompt, max_new_tokens=3, do_sample=False)
    assert torch.equal(got, want)
    # One prefill and two decoding steps (generate does not run the model for the last token it appends).
    assert kernels.calls == Counter({k: 3 * n for k, n in layer_calls().items()})


def test_a_layer_scalar_other_than_one_is_refused_by_name(models):
    model = copy.deepcopy(models["bf16"])
    with torch.no_grad():
        model.model.layers[1].layer_scalar.fill_(0.5)
    with pytest.raises(gemma.UnsupportedConfig, match="--layer-scalar"):
        gemma.swap_decoder_layers(model, StandInKernels("tiny"))


def run_once(fn, before=None):
    """The benchmark's timer, replaced: each measured function runs once, for its errors, and takes 1 ms."""
    if before:
        before()
    fn()
    return 1.0


@pytest.mark.parametrize("shape,check_tokens", [(gemma.LayerShape("prefill", batch=2, tokens=7), 16384),
                                                (gemma.LayerShape("decode", batch=2, keys=9), 16384),
                                                (gemma.LayerShape("prefill", batch=3, tokens=7), 7),
                                                (gemma.LayerShape("decode", batch=3, keys=9), 9)])
def test_the_benchmark_measures_a_case(models, shape, check_tokens, monkeypatch):
    """bench_gemma.measure_case as it runs on the GPU, on the CPU stand-in: its checks pass, each kernel's
    PyTorch counterpart computes what the kernel does (their errors are those of bf16 rounding), and the record
    holds every kernel of both layer types. With check_tokens below the case's, the references run on the first
    sequence only and the decoding cache is filled a sequence at a time and joined (bench_gemma.CHECK_TOKENS):
    the twist model, decoding from the joined cache, must still match on that sequence."""
    monkeypatch.setattr(bench_gemma, "CHECK_TOKENS", check_tokens)
    model, kernels = swapped(models)
    compiled = []

    def compiler(module):  # torch.compile's place, without compiling: which modules the benchmark compiles
        compiled.append(type(module).__name__)
        return module
    record = bench_gemma.measure_case(models, model, kernels, shape, bench_gemma.new_record(shape, "cpu", "-", 3),
                                      timer=run_once, compiler=compiler)
    assert record["ok"], record
    for layer in ("sliding", "full"):
        assert set(record["kernel_errors"][layer]) == set(gemma.KERNELS)
        assert max(record["kernel_errors"][layer].values()) < 1e-2, record["kernel_errors"][layer]
    assert record["end_to_end_speedup"] == {"vs_eager": 1.0, "vs_compile": 1.0}
    # One decoder layer of each type, eager, compiled and swapped, and the whole model compiled.
    assert record["layer_speedup"] == {kind: {"vs_eager": 1.0, "vs_compile": 1.0} for kind in ("sliding", "full")}
    assert sorted(compiled) == sorted(["Gemma4ForCausalLM", "Gemma4TextDecoderLayer", "Gemma4TextDecoderLayer"])
    assert set(record["compile_s"]) == {"forward", "sliding layer", "full layer"}
    assert all(layer._twist.stash is None for layer in model.model.layers)
    assert record["checked_sequences"] == (shape.batch if check_tokens > 9 else 1)
    # Attention's baseline is the function the eager layer calls, as it calls it: no mask at a full-attention
    # prefill (SDPA's is_causal), the window in sliding layers.
    implementation = models["bf16"].config._attn_implementation
    for layer in ("sliding", "full"):
        assert f"attn_implementation '{implementation}'" in record["pytorch_baselines"][f"{layer}/attention"]
    assert "sliding_window 5" in record["pytorch_baselines"]["sliding/attention"]
    assert "sliding_window None" in record["pytorch_baselines"]["full/attention"]
    if shape.phase == "prefill":
        assert "no mask (is_causal)" in record["pytorch_baselines"]["full/attention"]
    assert record["out_of_memory"] == {}
    assert bench_gemma.case_name(shape) in bench_gemma.format_table([record])
