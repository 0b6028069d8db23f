"""twist.gemma's GPU-free parts: the configuration's numbers, labels and export commands, and manifests that
this build's twist exports checked against the shapes the swapped layer passes (TWIST names the binary; those
tests skip, saying so, without one). No torch: the swap's wiring is tested in test_gemma_swap.py, its kernels
on the GPU machine (apps/gemma/bench_gemma.py)."""
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from twist import gemma
from twist.runtime import ManifestError

REPO = Path(__file__).resolve().parents[2]


def twist_binary():
    path = os.environ.get("TWIST", str(REPO / "build" / "release" / "apps" / "twist" / "twist"))
    if not Path(path).exists():
        pytest.skip(f"no twist binary at {path} (set TWIST)")
    return path


def test_config_kwargs_are_the_31b_dims_with_both_layer_types():
    kwargs = gemma.config_kwargs("31b", layers=3)
    assert kwargs["layer_types"] == ["sliding_attention", "sliding_attention", "full_attention"]
    assert gemma.dims_of(kwargs) == gemma.CONFIGS["31b"]
    assert gemma.config_name_for(gemma.dims_of(kwargs)) == "31b"
    with pytest.raises(ValueError, match="both attention types"):
        gemma.config_kwargs("31b", layers=1)


def test_dims_read_the_full_layers_from_a_per_layer_config():
    # transformers' newer Gemma4TextConfig moves global_head_dim and the global KV heads into per_layer_config.
    kwargs = gemma.config_kwargs("tiny")
    for key in ("global_head_dim", "num_global_key_value_heads"):
        kwargs.pop(key)
    kwargs["per_layer_config"] = {1: {"head_dim": 32, "num_key_value_heads": 1}}
    assert gemma.dims_of(kwargs) == gemma.CONFIGS["tiny"]


@pytest.mark.parametrize("key,value,what", [("hidden_size_per_layer_input", 256, "per-layer inputs"),
                                            ("enable_moe_block", True, "MoE"),
                                            ("use_bidirectional_attention", "all", "bidirectional"),
                                            ("hidden_activation", "silu", "gelu_pytorch_tanh")])
def test_unsupported_features_are_refused_by_name(key, value, what):
    kwargs = {**gemma.config_kwargs("tiny"), key: value}
    with pytest.raises(gemma.UnsupportedConfig, match=what):
        gemma.dims_of(kwargs)


def test_qkv_columns_count_values_only_where_they_are_not_the_keys():
    tiny = gemma.CONFIGS["tiny"]
    assert tiny.qkv_columns("sliding") == (4 + 2 * 2) * 16
    assert tiny.qkv_columns("full") == (4 + 1) * 32
    big = gemma.CONFIGS["31b"]
    assert big.qkv_columns("sliding") == (32 + 2 * 16) * 256
    assert big.qkv_columns("full") == (32 + 4) * 512


def test_shapes_labels_and_export_commands():
    decode = gemma.LayerShape("decode", batch=8, keys=4096)
    assert decode.rows == 8 and decode.key_count == 4096
    assert decode.label("31b", "full", "qkv") == "gemma_31b_full_decode_B8_S1_L4096_qkv"
    assert gemma.export_command("twist", "/o", "31b", "full", decode)[-2:] == ["--kv-len", "4096"]
    prefill = gemma.LayerShape("prefill", batch=2, tokens=2048)
    assert prefill.key_count == 2048 and "--kv-len" not in gemma.export_command("t", "/o", "31b", "full", prefill)
    with pytest.raises(ValueError, match="tokens=1"):
        gemma.LayerShape("decode", batch=1, tokens=4, keys=10)


def test_a_sliding_layer_decodes_against_its_window_only():
    big = gemma.CONFIGS["31b"]
    long = gemma.LayerShape("decode", batch=4, keys=32768)
    assert gemma.layer_shape(big, "sliding", long) == gemma.LayerShape("decode", 4, 1, 1024)
    assert gemma.layer_shape(big, "full", long) == long
    short = gemma.LayerShape("decode", batch=4, keys=100)
    assert gemma.layer_shape(big, "sliding", short) == short
    prefill = gemma.LayerShape("prefill", batch=1, tokens=4096)
    assert gemma.layer_shape(big, "sliding", prefill) == prefill


def test_decode_b64_l32768_is_exported_not_refused(tmp_path):
    # The full layers' K and V at decode B64 L32768 hold 64 x 4 x 32768 x 512 = 2^32 elements: the kernels
    # address them with 64-bit offsets (the manifest's wide_offsets), so the layer no longer refuses the shape.
    dims = gemma.CONFIGS["31b"]
    shape = gemma.LayerShape("decode", 64, keys=32768)
    assert math.prod(gemma.expected_buffers(dims, "full", shape)["attention"]["K"]) == 2**32
    assert not hasattr(gemma, "check_index_range")
    with pytest.raises(FileNotFoundError, match="no-twist-here"):  # it runs twist export, whatever the shape
        gemma.export_layer_kernels(str(tmp_path / "no-twist-here"), tmp_path, "31b", "full", shape)


def test_geometric_mean():
    assert gemma.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        gemma.geometric_mean([])


@pytest.mark.parametrize("layer", ["sliding", "full"])
@pytest.mark.parametrize("shape", [gemma.LayerShape("prefill", batch=2, tokens=7),
                                   gemma.LayerShape("decode", batch=3, keys=40)])
def test_exported_manifests_have_the_shapes_the_layer_passes(tmp_path, layer, shape):
    twist = twist_binary()
    gemma.export_layer_kernels(twist, tmp_path, "tiny", layer, shape)
    manifests = gemma.load_layer_manifests(tmp_path, "tiny", layer, shape)
    assert list(manifests) == list(gemma.KERNELS)
    assert manifests["attention"].notes["keys"] == str(shape.key_count)


def test_a_missing_or_mismatched_manifest_names_the_export_to_run(tmp_path):
    twist = twist_binary()
    shape = gemma.LayerShape("prefill", batch=1, tokens=5)
    with pytest.raises(ManifestError, match="export gemma --config tiny --layer full"):
        gemma.load_layer_manifests(tmp_path, "tiny", "full", shape)
    gemma.export_layer_kernels(twist, tmp_path, "tiny", "full", shape)
    # A manifest exported for another shape under this shape's label is caught by its buffers' shapes.
    other = tmp_path / "other"
    gemma.export_layer_kernels(twist, other, "tiny", "full", gemma.LayerShape("prefill", batch=1, tokens=6))
    wrong = gemma.LayerShape("prefill", 1, 6).label("tiny", "full", "o_proj")
    for path in other.glob(wrong + ".*"):
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(other / (wrong + ".json"), tmp_path / (shape.label("tiny", "full", "o_proj") + ".json"))
    with pytest.raises(ManifestError, match="buffer 'A' of kernel 'o_proj'"):
        gemma.load_layer_manifests(tmp_path, "tiny", "full", shape)


def test_the_export_refuses_a_decode_without_one_token(tmp_path):
    result = subprocess.run([twist_binary(), "export", "gemma", "--config", "tiny", "--layer", "full", "--phase",
                             "decode", "--tokens", "3", "--kv-len", "9", "--out", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "--tokens 1" in result.stderr
