"""twist.runtime and twist.torch_ops without a GPU: manifests, op names and schemas, argument packing, the
message when the extension module is missing, and (where PyTorch is installed) the op's fake implementation."""
import ctypes
import json
import subprocess
import sys
from pathlib import Path

import pytest

from twist.runtime import BufferArg, ManifestError, kernel_parameters, load_manifest
from twist.torch_ops import op_name, op_schema

SOURCES = Path(__file__).resolve().parents[1]


def write_manifest(directory: Path, label="gemm_f16_64x32x16", outputs=("C",), inputs=("A", "B")) -> Path:
    (directory / f"{label}.k.cubin").write_bytes(b"\x7fELF not a real cubin")
    shapes = {"A": [64, 16], "B": [16, 32], "C": [64, 32], "D": [64]}
    buffers = [{"name": n, "dtype": "f16", "shape": shapes.get(n, [8]), "role": "input"} for n in inputs]
    buffers += [{"name": n, "dtype": "f32", "shape": shapes.get(n, [8]), "role": "output"} for n in outputs]
    buffers.append({"name": "partials", "dtype": "f32", "shape": [4, 64, 32], "role": "workspace"})
    manifest = {"label": label, "arch": "sm_90a", "op": "gemm", "buffers": buffers,
                "kernels": [{"name": "k", "cubin": f"{label}.k.cubin", "grid": [2, 4, 1], "block": 128,
                             "shared_bytes": 1024, "registers": 64, "spill_bytes": 0,
                             "args": [{"buffer": n} for n in (*inputs, *outputs)]
                             + [{"scalar": "K", "dtype": "i32", "value": 16}]}]}
    path = directory / f"{label}.json"
    path.write_text(json.dumps(manifest))
    return path


def test_a_manifest_becomes_an_op_name_and_schema(tmp_path):
    manifest = load_manifest(write_manifest(tmp_path, label="gemm f16-64x32x16"))
    assert op_name(manifest) == "gemm_f16_64x32x16"
    assert op_schema(manifest) == "(Tensor A, Tensor B) -> Tensor"
    two = load_manifest(write_manifest(tmp_path, label="9lse", outputs=("C", "D")))
    assert op_name(two) == "op_9lse"
    assert op_schema(two) == "(Tensor A, Tensor B) -> (Tensor, Tensor)"


def test_a_manifest_without_outputs_or_with_unusable_input_names_is_refused(tmp_path):
    with pytest.raises(ManifestError, match="no buffer has role 'output'"):
        op_schema(load_manifest(write_manifest(tmp_path, outputs=())))
    with pytest.raises(ManifestError, match="not a valid argument name"):
        op_schema(load_manifest(write_manifest(tmp_path, inputs=("A", "B.t"))))


def test_parameters_are_the_buffers_addresses_then_the_scalars_in_the_kernels_order(tmp_path):
    manifest = load_manifest(write_manifest(tmp_path))
    kernel = manifest.kernels[0]
    assert kernel.args[0] == BufferArg("A")
    packed = kernel_parameters(kernel, {"A": 0x1000, "B": 0x2000, "C": 0x3000, "partials": 0x4000})
    values = [ctypes.cast(packed.array[i], ctypes.POINTER(t)).contents.value
              for i, t in enumerate([ctypes.c_uint64] * 3 + [ctypes.c_int32])]
    assert values == [0x1000, 0x2000, 0x3000, 16]


def test_the_dsl_without_the_extension_module_says_how_to_install_it():
    script = "import twist, twist.runtime\ntry:\n    twist.Func\nexcept ImportError as e:\n    print(e)\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            env={"PYTHONPATH": str(SOURCES), "PATH": ""}, cwd="/")
    assert "scripts/install-python-package.sh" in result.stdout


def test_the_fake_implementation_gives_the_manifests_outputs(tmp_path):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (the GPU machine has it)")
    from twist.torch_ops import register_manifest
    op = register_manifest(write_manifest(tmp_path), name="test_fake_gemm")
    a = torch.empty((64, 16), dtype=torch.float16, device="meta")
    b = torch.empty((16, 32), dtype=torch.float16, device="meta")
    c = op(a, b)
    assert c.shape == (64, 32) and c.dtype == torch.float32 and c.device.type == "meta"
    with pytest.raises(ValueError, match="input 'B'"):
        op(a, torch.empty((16, 33), dtype=torch.float16, device="meta"))
