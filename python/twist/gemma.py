"""Gemma 4 decoder layers on twist's kernels: transformers' model, with each decoder layer's forward swapped for
one that calls twist custom ops (torch.library, twist.torch_ops) for every projection GEMM, attention, RMSNorm
(the residual add fused between two of them), q/k RMSNorm with RoPE and the gated MLP's activation. The model's
own modules, weights, rotary embedding and KV cache stay; only the layers' forward functions change.

    from transformers import Gemma4TextConfig, Gemma4ForCausalLM
    import twist.gemma as tg
    config = Gemma4TextConfig(**tg.config_kwargs("31b", layers=2))
    model = Gemma4ForCausalLM(config).to("cuda", torch.bfloat16)
    shape = tg.LayerShape("prefill", batch=1, tokens=2048)
    for layer_type in ("sliding", "full"):
        tg.export_layer_kernels(twist_binary, out_dir, "31b", layer_type, shape)   # twist export gemma
    tg.swap_decoder_layers(model, tg.TwistKernels(out_dir, "31b", [shape]))

The kernels are exported ahead of time for fixed shapes (an exported program is compiled for one set of sizes),
so a forward pass runs only on shapes that were exported; any other raises, naming the export command to run.
What needs neither torch nor a GPU (the configuration's numbers, labels, export commands, checking manifests
against the shapes the model will pass) is tested without either (python/tests/test_gemma.py); torch is
imported only where tensors are made.
"""
from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .runtime import Manifest, ManifestError, load_manifest

# The kernels of one layer, in the order the layer runs them (apps/twist/main.cpp, export_gemma).
KERNELS = ("input_norm", "qkv", "q_norm_rope", "k_norm_rope", "v_norm", "attention", "o_proj",
           "post_attention_norm", "gate_up", "down_proj", "post_feedforward_norm")
LAYER_TYPES = {"sliding_attention": "sliding", "full_attention": "full"}


class UnsupportedConfig(ValueError):
    """A Gemma 4 text configuration with a feature the twist layer does not implement; the message names it."""


@dataclass(frozen=True)
class TextDims:
    """The numbers of a Gemma 4 text configuration that shape the kernels (apps/gemma/gemma.h, Config)."""
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    global_kv_heads: int
    global_head_dim: int
    global_values_from_keys: bool
    sliding_window: int
    eps: float

    def attention(self, layer: str) -> tuple[int, int, bool]:
        """(kv heads, head dim, values from keys) of a layer type, "sliding" or "full"."""
        if layer == "sliding":
            return self.kv_heads, self.head_dim, False
        if layer == "full":
            return self.global_kv_heads, self.global_head_dim, self.global_values_from_keys
        raise ValueError(f"layer type '{layer}': use sliding or full")

    def qkv_columns(self, layer: str) -> int:
        kv, d, from_keys = self.attention(layer)
        return (self.heads + kv * (1 if from_keys else 2)) * d


# apps/gemma/gemma.cpp's configurations, which `twist export gemma --config NAME` exports; the numbers and
# where they come from are in apps/gemma/README.md.
CONFIGS = {
    "31b": TextDims(hidden=5376, intermediate=21504, heads=32, kv_heads=16, head_dim=256, global_kv_heads=4,
                    global_head_dim=512, global_values_from_keys=True, sliding_window=1024, eps=1e-6),
    "tiny": TextDims(hidden=48, intermediate=40, heads=4, kv_heads=2, head_dim=16, global_kv_heads=1,
                     global_head_dim=32, global_values_from_keys=True, sliding_window=5, eps=1e-6),
}


def config_kwargs(name: str, layers: int = 2) -> dict:
    """Gemma4TextConfig's keyword arguments for the configuration `name` with `layers` decoder layers (sliding
    ones, then a full one: transformers forces the last layer to full attention). No per-layer inputs, no MoE,
    no KV sharing: the 31B model has none, and the twist layer implements none of them."""
    if name not in CONFIGS:
        raise ValueError(f"configuration '{name}': use one of {', '.join(CONFIGS)}")
    if layers < 2:
        raise ValueError("at least 2 layers, so that both attention types are covered")
    d = CONFIGS[name]
    return dict(hidden_size=d.hidden, intermediate_size=d.intermediate, num_hidden_layers=layers,
                num_attention_heads=d.heads, num_key_value_heads=d.kv_heads, head_dim=d.head_dim,
                num_global_key_value_heads=d.global_kv_heads, global_head_dim=d.global_head_dim,
                attention_k_eq_v=d.global_values_from_keys, sliding_window=d.sliding_window, rms_norm_eps=d.eps,
                hidden_activation="gelu_pytorch_tanh",
                layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                 "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                    "rope_theta": 1_000_000.0}},
                hidden_size_per_layer_input=0, num_kv_shared_layers=0, enable_moe_block=False,
                attention_bias=False, final_logit_softcapping=30.0)


def _get(config, key, default=None):
    return config.get(key, default) if isinstance(config, dict) else getattr(config, key, default)


def dims_of(config) -> TextDims:
    """The TextDims of a Gemma4TextConfig (or a dict of its fields); raises UnsupportedConfig for what the twist
    layer does not implement."""
    for key, bad, what in (("hidden_size_per_layer_input", lambda v: bool(v), "per-layer inputs (PLE)"),
                           ("enable_moe_block", lambda v: bool(v), "the MoE block"),
                           ("num_kv_shared_layers", lambda v: bool(v), "KV sharing between layers"),
                           ("attention_bias", lambda v: bool(v), "projection biases"),
                           ("use_bidirectional_attention", lambda v: v is not None, "bidirectional attention"),
                           ("hidden_activation", lambda v: v != "gelu_pytorch_tanh", "an activation other than "
                                                                                     "gelu_pytorch_tanh")):
        value = _get(config, key)
        if value is not None and bad(value):
            raise UnsupportedConfig(f"the configuration has {key}={value!r}: the twist layer does not implement "
                                    f"{what}; build the model with {key} as twist.gemma.config_kwargs sets it")
    sliding_kv, sliding_head_dim = _attention_fields(config, "sliding_attention")
    global_kv, global_head_dim = _attention_fields(config, "full_attention")
    return TextDims(hidden=_get(config, "hidden_size"), intermediate=_get(config, "intermediate_size"),
                    heads=_get(config, "num_attention_heads"), kv_heads=sliding_kv, head_dim=sliding_head_dim,
                    global_kv_heads=global_kv, global_head_dim=global_head_dim,
                    global_values_from_keys=bool(_get(config, "attention_k_eq_v", False)),
                    sliding_window=_get(config, "sliding_window"), eps=float(_get(config, "rms_norm_eps")))


def _attention_fields(config, layer_type: str) -> tuple[int, int]:
    """(KV heads, head dim) of a layer type. A Gemma4TextConfig keeps them per layer (`per_layer_config`, indexed
    by layer type; reading `config.head_dim` raises, as the full layers' differ); its keyword arguments
    (config_kwargs) name the full layers' as `global_head_dim` and, where the values are the keys,
    `num_global_key_value_heads`, or give a `per_layer_config` of overrides by layer index."""
    if not isinstance(config, dict):
        layer = config.per_layer_config[layer_type]
        return layer.num_key_value_heads, layer.head_dim
    kv, head_dim = config.get("num_key_value_heads"), config.get("head_dim")
    if layer_type == "sliding_attention":
        return kv, head_dim
    overrides = config.get("per_layer_config") or {}
    first_full = next((i for i, t in enumerate(config.get("layer_types") or []) if t == layer_type), None)
    full = overrides.get(first_full, {})
    head_dim = config.get("global_head_dim") or full.get("head_dim") or head_dim
    if config.get("attention_k_eq_v"):
        kv = config.get("num_global_key_value_heads") or full.get("num_key_value_heads") or kv
    return kv, head_dim


def config_name_for(dims: TextDims) -> str:
    """The name of the exported configuration with these dims; raises UnsupportedConfig if there is none."""
    for name, known in CONFIGS.items():
        if known == dims:
            return name
    raise UnsupportedConfig(f"no twist Gemma configuration has the dims {dims}; the kernels are exported for "
                            f"{', '.join(CONFIGS)} (apps/gemma/gemma.cpp): build the model from "
                            "twist.gemma.config_kwargs")


@dataclass(frozen=True)
class LayerShape:
    """What one forward call of a layer processes: `batch` sequences of `tokens` new tokens; decoding takes one
    token against `keys` keys of the cache (the new one included)."""
    phase: str
    batch: int
    tokens: int = 1
    keys: int = 0

    def __post_init__(self):
        if self.phase not in ("prefill", "decode"):
            raise ValueError(f"phase '{self.phase}': use prefill or decode")
        if self.phase == "decode" and (self.tokens != 1 or self.keys < 1):
            raise ValueError("decoding takes tokens=1 and the number of keys in the cache (keys >= 1)")
        if self.batch < 1 or self.tokens < 1:
            raise ValueError(f"batch {self.batch} and tokens {self.tokens} must be positive")

    @property
    def rows(self) -> int:
        return self.batch * self.tokens

    @property
    def key_count(self) -> int:
        return self.keys if self.phase == "decode" else self.tokens

    def label(self, config: str, layer: str, kernel: str) -> str:
        """The manifest's label, as twist export gemma writes it."""
        keys = f"_L{self.keys}" if self.phase == "decode" else ""
        return f"gemma_{config}_{layer}_{self.phase}_B{self.batch}_S{self.tokens}{keys}_{kernel}"


def layer_shape(dims: TextDims, layer: str, shape: LayerShape) -> LayerShape:
    """The shape a layer type's kernels see for a forward call of `shape`: a sliding layer decodes against
    the keys its cache keeps, the last `sliding_window` (transformers' sliding cache returns at most that many
    keys, the new one included)."""
    if layer == "sliding" and shape.phase == "decode" and shape.keys > dims.sliding_window:
        return LayerShape("decode", shape.batch, 1, dims.sliding_window)
    return shape


def export_command(twist: str, out_dir: str | Path, config: str, layer: str, shape: LayerShape,
                   layer_scalar: float = 1.0) -> list[str]:
    """The twist export gemma command line that writes one layer type's kernels for `shape`."""
    command = [str(twist), "export", "gemma", "--config", config, "--layer", layer, "--phase", shape.phase,
               "--batch", str(shape.batch), "--tokens", str(shape.tokens), "--out", str(out_dir)]
    if shape.phase == "decode":
        command += ["--kv-len", str(shape.keys)]
    if layer_scalar != 1.0:
        command += ["--layer-scalar", repr(layer_scalar)]
    return command


def export_layer_kernels(twist: str, out_dir: str | Path, config: str, layer: str, shape: LayerShape,
                         layer_scalar: float = 1.0) -> None:
    """Runs twist export gemma (NVRTC compiles: no GPU needed); raises RuntimeError with twist's message. A
    kernel whose buffers pass 2^31 - 1 elements at `shape` (the full layers' K and V at decode B64 L32768) is
    exported addressing them with 64-bit offsets (its manifest's "wide_offsets")."""
    command = export_command(twist, out_dir, config, layer, shape, layer_scalar)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")


def expected_buffers(dims: TextDims, layer: str, shape: LayerShape) -> dict[str, dict[str, tuple[int, ...]]]:
    """Per kernel, the shape of every input and output buffer the swapped layer passes or expects."""
    kv, d, _ = dims.attention(layer)
    rows, hidden, b, s, keys = shape.rows, dims.hidden, shape.batch, shape.tokens, shape.key_count
    columns = dims.qkv_columns(layer)
    head = {"x": (b, s, columns // d, d)}
    rope = {"cos": (b, s, d), "sin": (b, s, d)}
    residual = {"x": (rows, hidden), "residual": (rows, hidden), "w_post": (hidden,), "w_next": (hidden,),
                "out.0": (rows, hidden), "out.1": (rows, hidden)}
    return {
        "input_norm": {"x": (rows, hidden), "w": (hidden,), "rmsnorm": (rows, hidden)},
        "qkv": {"A": (rows, hidden), "B": (hidden, columns), "out": (rows, columns)},
        "q_norm_rope": {**head, **rope, "w": (d,), "out": (b, dims.heads, s, d)},
        "k_norm_rope": {**head, **rope, "w": (d,), "out": (b, kv, s, d)},
        "v_norm": {**head, "out": (b, kv, s, d)},
        "attention": {"Q": (b, dims.heads, s, d), "K": (b, kv, keys, d), "V": (b, kv, keys, d),
                      "out": (b, dims.heads, s, d)},
        "o_proj": {"A": (rows, dims.heads * d), "B": (dims.heads * d, hidden), "out": (rows, hidden)},
        "post_attention_norm": residual,
        "gate_up": {"A": (rows, hidden), "B": (hidden, 2 * dims.intermediate), "gated": (rows, dims.intermediate)},
        "down_proj": {"A": (rows, dims.intermediate), "B": (dims.intermediate, hidden), "out": (rows, hidden)},
        "post_feedforward_norm": residual,
    }


def check_manifest(manifest: Manifest, kernel: str, expected: dict[str, tuple[int, ...]]) -> None:
    """Raises ManifestError if the manifest is not the kernel's, or a buffer's shape is not what the layer
    passes; buffers the layer does not name (workspaces) are not checked."""
    if manifest.notes.get("op") != "gemma" or manifest.notes.get("kernel") != kernel:
        raise ManifestError(f"{manifest.path}: not the gemma kernel '{kernel}' (its notes say op "
                            f"{manifest.notes.get('op')!r}, kernel {manifest.notes.get('kernel')!r})")
    names = {b.name for b in manifest.buffers if b.role != "workspace"}
    missing = set(expected) - names
    if missing:
        raise ManifestError(f"{manifest.path}: kernel '{kernel}' has no buffer {', '.join(sorted(missing))}")
    for name, want in expected.items():
        got = manifest.buffer(name).shape
        if tuple(got) != tuple(want):
            raise ManifestError(f"{manifest.path}: buffer '{name}' of kernel '{kernel}' is {tuple(got)}, but the "
                                f"layer passes {tuple(want)}; export the kernels for this shape again")


def load_layer_manifests(directory: str | Path, config: str, layer: str, shape: LayerShape,
                         twist: str = "twist") -> dict[str, Manifest]:
    """Every kernel's manifest of one layer type at `shape`, checked against the shapes the layer passes."""
    directory = Path(directory)
    dims = CONFIGS[config]
    expected = expected_buffers(dims, layer, shape)
    manifests = {}
    for kernel in KERNELS:
        path = directory / (shape.label(config, layer, kernel) + ".json")
        if not path.exists():
            raise ManifestError(f"{path} does not exist; export the layer's kernels first: "
                                + " ".join(export_command(twist, directory, config, layer, shape)))
        manifest = load_manifest(path)
        check_manifest(manifest, kernel, expected[kernel])
        manifests[kernel] = manifest
    return manifests


def geometric_mean(values) -> float:
    values = list(values)
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"a geometric mean needs positive values, not {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


# --- the swap (needs torch and a GPU) ------------------------------------------------------------------------

_OPS: dict[str, tuple] = {}  # the registered op of each manifest label, and its inputs' names in order


class TwistKernels:
    """The custom ops of every exported (layer type, shape), registered with torch.library on first use."""

    def __init__(self, directory: str | Path, config: str, shapes, layer_types=("sliding", "full")):
        self.directory, self.config = Path(directory), config
        dims = CONFIGS[config]
        self.manifests = {}
        for layer in layer_types:
            for shape in shapes:
                seen = layer_shape(dims, layer, shape)
                self.manifests[(layer, seen)] = load_layer_manifests(directory, config, layer, seen)

    def call(self, layer: str, shape: LayerShape, kernel: str, **tensors):
        """Runs one kernel on tensors named as its manifest's inputs; returns its output(s)."""
        from .torch_ops import register_manifest
        if (layer, shape) not in self.manifests:
            raise ManifestError(f"no {layer} kernels were exported for {shape}; run: "
                                + " ".join(export_command("twist", self.directory, self.config, layer, shape)))
        manifest = self.manifests[(layer, shape)][kernel]
        if manifest.label not in _OPS:  # once per process: torch.library refuses a name registered twice
            _OPS[manifest.label] = (register_manifest(manifest), [b.name for b in manifest.with_role("input")])
        op, inputs = _OPS[manifest.label]
        return op(*(tensors[name] for name in inputs))


def _weight_kn(*linears):
    """nn.Linear weights ([N, K] each) as one [K, sum N] matrix, the GEMMs' B."""
    import torch
    with torch.no_grad():  # a copy of the weights, not a function of them: the kernels take no gradients
        return torch.cat([linear.weight for linear in linears], dim=0).t().contiguous()


def _interleaved_kn(gate, up):
    """The gate and up projections' weights interleaved column by column, [K, 2N]: column 2j is the gate's
    column j, column 2j + 1 the up's (the gate_up GEMM's B; apps/gemma/gemma.h, GatedUp)."""
    import torch
    with torch.no_grad():
        return torch.stack([gate.weight, up.weight], dim=1).reshape(-1, gate.weight.shape[1]).t().contiguous()


def swap_decoder_layers(model, kernels: TwistKernels) -> None:
    """Replaces the forward of every Gemma4TextDecoderLayer of `model` (a Gemma4ForCausalLM or
    Gemma4TextModel) by one on twist's kernels. Each layer hands its normalized output to the next layer's
    input norm (the residual norm's second output), which the next layer takes when it receives that same
    hidden state; the last layer's goes to the model's final norm. The attention mask is not read: the kernels
    are causal (and windowed in sliding layers) over unpadded sequences, so batches must not be padded."""
    import types
    text_model = getattr(model, "model", model)
    layers = list(text_model.layers)
    dims = dims_of(model.config)
    if config_name_for(dims) != kernels.config:
        raise UnsupportedConfig(f"the model has the dims of '{config_name_for(dims)}', the kernels are "
                                f"'{kernels.config}'")
    for index, layer in enumerate(layers):
        if float(layer.layer_scalar.float().item()) != 1.0:
            raise UnsupportedConfig(f"layer {index} has layer_scalar {layer.layer_scalar.item()}; the kernels "
                                    "were exported with 1: export them with --layer-scalar")
        attn, mlp = layer.self_attn, layer.mlp
        layer._twist = types.SimpleNamespace(
            kind=LAYER_TYPES[attn.layer_type], index=index, stash=None,
            qkv=_weight_kn(*[p for p in (attn.q_proj, attn.k_proj, attn.v_proj) if p is not None]),
            o=_weight_kn(attn.o_proj), gate_up=_interleaved_kn(mlp.gate_proj, mlp.up_proj), down=_weight_kn(mlp.down_proj),
            next_norm=(layers[index + 1].input_layernorm if index + 1 < len(layers) else text_model.norm),
            next_layer=layers[index + 1] if index + 1 < len(layers) else None)
        layer.forward = types.MethodType(_twist_layer_forward(kernels, dims), layer)
    _take_final_norm_from_last_layer(text_model.norm)


def clear_stashes(model) -> None:
    """Drops the normalized outputs the swapped layers hand on (swap_decoder_layers): after a layer was called
    on its own, as the benchmark times one, its hand-over must not outlive the call."""
    text_model = getattr(model, "model", model)
    for layer in text_model.layers:
        layer._twist.stash = None
    text_model.norm._twist_stash = None


def _take_final_norm_from_last_layer(norm) -> None:
    """The model's final norm returns the last layer's second output when it is given that layer's output;
    anything else (a hidden state the layers did not produce) goes through the module's own forward."""
    import types
    own = norm.forward
    norm._twist_stash = None

    def forward(self, hidden_states):
        stash, self._twist_stash = self._twist_stash, None
        return stash[1] if stash is not None and stash[0] is hidden_states else own(hidden_states)
    norm.forward = types.MethodType(forward, norm)


def _twist_layer_forward(kernels: TwistKernels, dims: TextDims):
    def forward(self, hidden_states, per_layer_input=None, shared_kv_states=None, position_embeddings=None,
                attention_mask=None, position_ids=None, past_key_values=None, **kwargs):
        t, attn = self._twist, self.self_attn
        b, s, hidden = hidden_states.shape
        # The rotary tables are [1, S, D] when every sequence has the same positions; the kernels read [B, S, D].
        cos, sin = (table.expand(b, s, -1) for table in position_embeddings)
        cached = past_key_values.get_seq_length(self.layer_idx) if past_key_values is not None else 0
        decode = s == 1 and cached > 0
        shape = layer_shape(dims, t.kind, LayerShape("decode", b, 1, cached + 1) if decode else
                            LayerShape("prefill", b, s))
        run = lambda kernel, **tensors: kernels.call(t.kind, shape, kernel, **tensors)  # noqa: E731
        h = hidden_states.reshape(b * s, hidden)
        stash, t.stash = t.stash, None
        y = stash[1] if stash is not None and stash[0] is hidden_states else \
            run("input_norm", x=h, w=self.input_layernorm.weight)
        projected = run("qkv", A=y, B=t.qkv).view(b, s, -1, attn.head_dim)
        q = run("q_norm_rope", x=projected, w=attn.q_norm.weight, cos=cos, sin=sin)
        k = run("k_norm_rope", x=projected, w=attn.k_norm.weight, cos=cos, sin=sin)
        v = run("v_norm", x=projected)
        if past_key_values is not None:
            k, v = past_key_values.update(k, v, self.layer_idx)
        if k.shape[2] != shape.key_count:
            # A sliding-window cache keeps only the window's keys: the kernels must be exported for what it holds.
            raise ManifestError(f"layer {self.layer_idx} ({t.kind}) attends to {k.shape[2]} keys, but its kernels "
                                f"were chosen for {shape.key_count}; export and use a decode shape of "
                                f"keys={k.shape[2]}")
        a = run("attention", Q=q, K=k, V=v).transpose(1, 2).reshape(b * s, -1)
        o = run("o_proj", A=a, B=t.o)
        h, y = run("post_attention_norm", x=o, residual=h, w_post=self.post_attention_layernorm.weight,
                   w_next=self.pre_feedforward_layernorm.weight)
        g = run("gate_up", A=y, B=t.gate_up)
        d = run("down_proj", A=g, B=t.down)
        h, y = run("post_feedforward_norm", x=d, residual=h, w_post=self.post_feedforward_layernorm.weight,
                   w_next=t.next_norm.weight)
        out = h.view(b, s, hidden)
        if t.next_layer is not None:
            t.next_layer._twist.stash = (out, y)
        else:
            t.next_norm._twist_stash = (out, y.view(b, s, hidden))
        return out
    return forward


__all__ = ["CONFIGS", "KERNELS", "LayerShape", "TextDims", "TwistKernels", "UnsupportedConfig", "check_manifest",
           "clear_stashes", "config_kwargs", "config_name_for", "dims_of", "expected_buffers", "export_command",
           "export_layer_kernels", "geometric_mean", "layer_shape", "load_layer_manifests", "swap_decoder_layers"]
