"""twist.runtime and twist.torch_ops without a GPU: manifests, op names and schemas, argument packing (tensor maps
encoded through a stand-in for the driver), launches in clusters through cuLaunchKernelEx (a stand-in again, and
its configuration's layout against cuda.h), the message when the extension module is missing, and (where PyTorch is
installed) the op's fake implementation."""
import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from twist.runtime import (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
                           BufferArg, CUclusterDim, CUlaunchAttribute, CUlaunchAttributeValue, CUlaunchConfig,
                           ExtendedLaunch, LoadedKernels, ManifestError, PackedArgs, PackedArgsCache, TensorMapArg,
                           _Loaded, kernel_parameters, load_manifest, needs_extended_launch)
from twist.tensor_map import DATA_TYPES, SWIZZLES, CUtensorMap
from twist.torch_ops import op_name, op_schema

from stand_in_driver import ENCODED_MARK, StandInDriver

SOURCES = Path(__file__).resolve().parents[1]


def write_manifest(directory: Path, label="gemm_f16_64x32x16", outputs=("C",), inputs=("A", "B"),
                   kernel_changes=None) -> Path:
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
    manifest["kernels"][0].update(kernel_changes or {})
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
    script = "import twist, twist.runtime\ntry:\n    twist.Func\nexcept AttributeError as e:\n    print(e)\n"
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


def write_tma_manifest(directory: Path, kernel_changes=None, map_changes=None) -> Path:
    """A kernel as export_program writes one with TMA: two tensor maps (after the buffers and the scalar) and a
    cluster of two blocks along x."""
    (directory / "tma.copy.cubin").write_bytes(b"\x7fELF not a real cubin")
    a_map = {"name": "A_map", "buffer": "A", "dtype": "bf16", "extents": [200, 64], "strides": [64, 1],
             "box": [64, 64], "swizzle": 128}
    a_map.update(map_changes or {})
    kernel = {"name": "copy", "cubin": "tma.copy.cubin", "grid": [2, 1, 1], "block": 128, "shared_bytes": 0,
              "cluster": [2, 1, 1], "registers": 32, "spill_bytes": 0,
              "args": [{"buffer": "C"}, {"buffer": "A"}, {"scalar": "M", "dtype": "i32", "value": 100},
                       {"tensor_map": "A_map"}, {"tensor_map": "C_map"}],
              "tensor_maps": [a_map, {"name": "C_map", "buffer": "C", "dtype": "f32", "extents": [100, 64],
                                      "strides": [64, 1], "box": [32, 16], "swizzle": 0}]}
    kernel.update(kernel_changes or {})
    manifest = {"label": "tma", "arch": "sm_90a", "kernels": [kernel],
                "buffers": [{"name": "A", "dtype": "bf16", "shape": [2, 100, 64], "role": "input"},
                            {"name": "C", "dtype": "f32", "shape": [100, 64], "role": "output"}]}
    path = directory / "tma.json"
    path.write_text(json.dumps(manifest))
    return path


def test_tensor_maps_are_encoded_over_their_buffers_and_passed_after_the_scalars(tmp_path):
    kernel = load_manifest(write_tma_manifest(tmp_path)).kernels[0]
    assert kernel.cluster == (2, 1, 1)
    assert kernel.args[3:] == (TensorMapArg("A_map"), TensorMapArg("C_map"))
    driver = StandInDriver()
    packed = kernel_parameters(kernel, {"A": 0x7F0000001000, "C": 0x7F0000100000}, driver)
    assert len(packed.array) == 5
    assert [ctypes.cast(packed.array[i], ctypes.POINTER(ctypes.c_uint64)).contents.value for i in range(2)] == \
        [0x7F0000100000, 0x7F0000001000]
    assert ctypes.cast(packed.array[2], ctypes.POINTER(ctypes.c_int32)).contents.value == 100
    # Each map is encoded over its own buffer, innermost dimension first, and passed by the address of the map the
    # driver filled (128-byte aligned, as a CUtensorMap parameter must be).
    a, c = driver.calls
    assert (a["address"], a["dims"], a["box"], a["strides"]) == (0x7F0000001000, [64, 200], [64, 64], [128])
    assert a["data_type"] == DATA_TYPES["bf16"] and a["swizzle"] == SWIZZLES[128]
    assert (c["address"], c["dims"], c["box"], c["strides"]) == (0x7F0000100000, [64, 100], [16, 32], [256])
    assert c["data_type"] == DATA_TYPES["f32"] and c["swizzle"] == SWIZZLES[0]
    assert [packed.array[3], packed.array[4]] == [a["map_address"], c["map_address"]]
    for i in (3, 4):
        assert packed.array[i] % 128 == 0
        assert CUtensorMap.from_address(packed.array[i]).opaque[0] == ENCODED_MARK


def test_each_set_of_buffer_addresses_is_packed_once(tmp_path):
    kernel = load_manifest(write_tma_manifest(tmp_path)).kernels[0]
    driver = StandInDriver()
    cache = PackedArgsCache([kernel], ["A", "C"], driver, capacity=2)
    first = (0x7F0000001000, 0x7F0000100000)
    packed = cache(first)
    assert len(driver.calls) == 2  # both maps encoded
    assert cache(tuple(first)) is packed  # the same addresses again: nothing encoded
    assert len(driver.calls) == 2
    moved = cache((0x7F0000001000, 0x7F0000200000))
    assert len(driver.calls) == 4 and driver.calls[-1]["address"] == 0x7F0000200000
    assert ctypes.cast(moved[0].array[0], ctypes.POINTER(ctypes.c_uint64)).contents.value == 0x7F0000200000
    # At capacity (2) the least recently used set goes: `first` is used again, so a new set evicts `moved`.
    assert cache(first) is packed
    cache((0x7F0000003000, 0x7F0000100000))
    assert cache(first) is packed
    encoded = len(driver.calls)
    cache((0x7F0000001000, 0x7F0000200000))
    assert len(driver.calls) == encoded + 2
    with pytest.raises(ValueError, match="1 buffer addresses given for the 2 buffers A, C"):
        cache((0x7F0000001000,))


def test_a_missing_buffer_address_names_the_kernel_and_the_map(tmp_path):
    kernel = load_manifest(write_tma_manifest(tmp_path, kernel_changes={"args": [{"tensor_map": "A_map"}]})).kernels[0]
    with pytest.raises(ValueError, match="kernel 'copy' maps buffer 'A' with tensor map 'A_map', but no device"):
        kernel_parameters(kernel, {"C": 0x1000}, StandInDriver())


@pytest.mark.parametrize("kernel_changes, map_changes, message", [
    ({"args": [{"tensor_map": "B_map"}]}, None, "tensor map 'B_map' is not among the kernel's tensor_maps"),
    (None, {"buffer": "B"}, "buffer 'B' is not among the manifest's buffers"),
    (None, {"dtype": "f16"}, "the map reads f16 elements but buffer 'A' holds bf16"),
    (None, {"extents": [100, 64], "strides": [64, 1]},
     r"cover 6400 elements but buffer 'A' of shape \[2, 100, 64\] has 12800"),
    (None, {"box": [300, 64]}, "tensor map 'A_map' over buffer 'A'.*box dimension 0 is 300 elements"),
    ({"cluster": [2, 0, 1]}, None, r"cluster \[2, 0, 1\] must be three positive integers"),
    ({"grid": [3, 1, 1]}, None, r"grid \[3, 1, 1\] is not a whole number of clusters \[2, 1, 1\]"),
    ({"grid": [4, 4, 1], "cluster": [4, 4, 1]}, None, r"clusters of \[4, 4, 1\] blocks exceed the portable limit of 8"),
])
def test_a_manifest_with_unusable_tensor_maps_or_clusters_is_refused(tmp_path, kernel_changes, map_changes, message):
    with pytest.raises(ManifestError, match=message):
        load_manifest(write_tma_manifest(tmp_path, kernel_changes, map_changes))


def test_a_buffer_past_32_bit_offsets_needs_a_kernel_that_addresses_it_in_64_bits(tmp_path):
    path = write_manifest(tmp_path)
    data = json.loads(path.read_text())
    data["buffers"][0]["shape"] = [65536, 32768]  # A: 2^31 elements, one past the largest 32-bit offset
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=r"input buffer 'A' of shape \[65536, 32768\] has 2147483648 elements, "
                                            r"past the 2147483647 that the generated kernel's 32-bit offsets reach"):
        load_manifest(path)
    data["kernels"][0]["wide_offsets"] = ["A"]  # as twist export writes it for such a kernel
    path.write_text(json.dumps(data))
    assert load_manifest(path).kernels[0].wide_offsets == ("A",)
    data["kernels"][0]["wide_offsets"] = ["X"]
    path.write_text(json.dumps(data))
    with pytest.raises(ManifestError, match=r"wide_offsets \['X'\] must name buffers the kernel takes"):
        load_manifest(path)
    # Smaller buffers need none; a manifest without the field has none.
    assert load_manifest(write_manifest(tmp_path, label="small")).kernels[0].wide_offsets == ()


def test_a_manifest_without_clusters_or_tensor_maps_launches_in_no_clusters(tmp_path):
    kernel = load_manifest(write_manifest(tmp_path)).kernels[0]
    assert kernel.cluster == (1, 1, 1) and kernel.tensor_maps == {}


class StandInLaunches:
    """cuLaunchKernel and cuLaunchKernelEx as C callbacks with cuda.h's prototypes, recording what they received."""

    def __init__(self):
        self.calls = []
        p = ctypes.c_void_p

        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            self.calls.append(("cuLaunchKernel", function, (gx, gy, gz), (bx, by, bz), shared, stream, params[0]))
            return 0

        def launch_ex(config, function, params, extra):
            c = config.contents
            attributes = [(c.attrs[i].id, tuple(getattr(c.attrs[i].value.clusterDim, d) for d in "xyz")
                           if c.attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                           else c.attrs[i].value.programmaticStreamSerializationAllowed)
                          for i in range(c.numAttrs)]
            self.calls.append(("cuLaunchKernelEx", function, (c.gridDimX, c.gridDimY, c.gridDimZ),
                               (c.blockDimX, c.blockDimY, c.blockDimZ), c.sharedMemBytes, c.hStream, params[0],
                               attributes))
            return 0

        self.cuLaunchKernel = ctypes.CFUNCTYPE(ctypes.c_int, p, *[ctypes.c_uint] * 7, p, ctypes.POINTER(p),
                                               ctypes.POINTER(p))(launch)
        self.cuLaunchKernelEx = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(CUlaunchConfig), p, ctypes.POINTER(p),
                                                 ctypes.POINTER(p))(launch_ex)


def test_kernels_in_clusters_or_launched_dependently_go_through_cuLaunchKernelEx_the_others_cuLaunchKernel(
        tmp_path):
    clustered = load_manifest(write_tma_manifest(tmp_path, {"grid": [4, 3, 1], "shared_bytes": 512})).kernels[0]
    both = load_manifest(write_tma_manifest(tmp_path, {"dependent_launch": True})).kernels[0]
    plain = load_manifest(write_manifest(tmp_path)).kernels[0]
    dependent = load_manifest(write_manifest(tmp_path, kernel_changes={"dependent_launch": True})).kernels[0]
    assert not plain.dependent_launch and dependent.dependent_launch and both.dependent_launch
    assert [needs_extended_launch(k) for k in (clustered, both, plain, dependent)] == [True, True, False, True]
    driver = StandInLaunches()
    # The loaded kernels as LoadedKernels holds them after loading, over the stand-in driver.
    kernels = LoadedKernels.__new__(LoadedKernels)
    kernels._driver = driver
    kernels.kernels = [_Loaded(k, ctypes.c_void_p(), ctypes.c_void_p(0x51 + i), k.name,
                               ExtendedLaunch(k) if needs_extended_launch(k) else None)
                       for i, k in enumerate((clustered, both, plain, dependent))]
    packed = [PackedArgs([ctypes.c_uint64(0xA + i)]) for i in range(4)]
    kernels.launch(packed, stream=0x5000, wait=False)
    cluster, serialized = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert driver.calls == [
        ("cuLaunchKernelEx", 0x51, (4, 3, 1), (128, 1, 1), 512, 0x5000, packed[0].array[0], [(cluster, (2, 1, 1))]),
        ("cuLaunchKernelEx", 0x52, (2, 1, 1), (128, 1, 1), 0, 0x5000, packed[1].array[0],
         [(cluster, (2, 1, 1)), (serialized, 1)]),
        ("cuLaunchKernel", 0x53, (2, 4, 1), (128, 1, 1), 1024, 0x5000, packed[2].array[0]),
        ("cuLaunchKernelEx", 0x54, (2, 4, 1), (128, 1, 1), 1024, 0x5000, packed[3].array[0], [(serialized, 1)]),
    ]


def test_dependent_launch_must_be_a_boolean(tmp_path):
    with pytest.raises(ManifestError, match="dependent_launch 1 must be true or false"):
        load_manifest(write_manifest(tmp_path, kernel_changes={"dependent_launch": 1}))


def test_cached_parameters_launch_on_the_addresses_of_each_call(tmp_path):
    """The op's calls go through LoadedKernels.pack's cache: when an input or output moves, the launch must read
    the new addresses, never a set packed for earlier tensors, and going back to earlier tensors must reuse their
    set. The stand-in reads the parameters' values at launch, as the driver copies them."""
    manifests = [load_manifest(write_manifest(tmp_path)), load_manifest(write_tma_manifest(tmp_path))]
    encoder = StandInDriver()
    launched = []

    def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        launched.append([ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64)).contents.value for i in range(3)]
                        + [ctypes.cast(params[3], ctypes.POINTER(ctypes.c_int32)).contents.value])
        return 0

    def launch_ex(config, function, params, extra):
        # The TMA kernel's parameters: C, A, M, then the two maps by the address of each encoded map.
        launched.append([ctypes.cast(params[i], ctypes.POINTER(ctypes.c_uint64)).contents.value for i in range(2)]
                        + [params[3], params[4]])
        return 0

    p = ctypes.c_void_p
    driver = StandInLaunches()
    driver.cuLaunchKernel = ctypes.CFUNCTYPE(ctypes.c_int, p, *[ctypes.c_uint] * 7, p, ctypes.POINTER(p),
                                             ctypes.POINTER(p))(launch)
    driver.cuLaunchKernelEx = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(CUlaunchConfig), p, ctypes.POINTER(p),
                                               ctypes.POINTER(p))(launch_ex)
    loaded = {}
    for manifest in manifests:
        kernels = LoadedKernels.__new__(LoadedKernels)
        kernels.manifest, kernels._driver = manifest, driver
        kernels.kernels = [_Loaded(k, ctypes.c_void_p(), ctypes.c_void_p(0x51), k.name,
                                   ExtendedLaunch(k) if needs_extended_launch(k) else None) for k in manifest.kernels]
        kernels._packed = PackedArgsCache(manifest.kernels, [b.name for b in manifest.buffers], encoder)
        loaded[manifest.label] = kernels

    plain = loaded["gemm_f16_64x32x16"]  # buffers A, B, C, partials; parameters A, B, C, then K = 16
    calls = [(0x1000, 0x2000, 0x3000, 0x4000), (0x1000, 0x2000, 0x5000, 0x4000),  # the output moved
             (0x6000, 0x2000, 0x3000, 0x4000), (0x1000, 0x2000, 0x3000, 0x4000)]  # an input moved; the first again
    for addresses in calls:
        plain.launch(plain.pack(addresses), stream=0, wait=False)
    assert launched == [[a, b, c, 16] for a, b, c, _ in calls]
    assert plain.pack(calls[0]) is plain.pack(calls[3])

    launched.clear()
    tma = loaded["tma"]  # buffers A, C; maps over A and C
    for addresses in [(0x7F0000001000, 0x7F0000100000), (0x7F0000002000, 0x7F0000100000),
                      (0x7F0000001000, 0x7F0000100000)]:
        tma.launch(tma.pack(addresses), stream=0, wait=False)
        c, a, a_map, c_map = launched[-1]
        assert (a, c) == addresses
        # Each map passed is the one the encoder filled over this call's buffer.
        encoded = {call["map_address"]: call["address"] for call in encoder.calls}
        assert (encoded[a_map], encoded[c_map]) == addresses
    assert len(encoder.calls) == 4  # two sets of addresses, two maps each: the third call re-encoded nothing


LAYOUT_PROGRAM = r"""
#include <cuda.h>
#include <stddef.h>
#include <stdio.h>
#define FIELD(type, field) printf("\"%s.%s\": [%zu, %zu],\n", #type, #field, offsetof(type, field), \
                                  sizeof(((type *)0)->field))
int main(void) {
  printf("{\n");
  FIELD(CUlaunchConfig, gridDimX); FIELD(CUlaunchConfig, gridDimY); FIELD(CUlaunchConfig, gridDimZ);
  FIELD(CUlaunchConfig, blockDimX); FIELD(CUlaunchConfig, blockDimY); FIELD(CUlaunchConfig, blockDimZ);
  FIELD(CUlaunchConfig, sharedMemBytes); FIELD(CUlaunchConfig, hStream); FIELD(CUlaunchConfig, attrs);
  FIELD(CUlaunchConfig, numAttrs);
  FIELD(CUlaunchAttribute, id); FIELD(CUlaunchAttribute, value);
  FIELD(CUlaunchAttributeValue, clusterDim.x); FIELD(CUlaunchAttributeValue, clusterDim.y);
  FIELD(CUlaunchAttributeValue, clusterDim.z); FIELD(CUlaunchAttributeValue, programmaticStreamSerializationAllowed);
  printf("\"sizeof CUlaunchConfig\": %zu, \"sizeof CUlaunchAttribute\": %zu, \"sizeof CUlaunchAttributeValue\": %zu,\n",
         sizeof(CUlaunchConfig), sizeof(CUlaunchAttribute), sizeof(CUlaunchAttributeValue));
  printf("\"CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION\": %d,\n", (int)CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
  printf("\"CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION\": %d}\n",
         (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  return 0;
}
"""


def test_the_launch_configuration_has_cuda_hs_layout(tmp_path):
    include = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if not (include / "cuda.h").is_file() or compiler is None:
        pytest.skip(f"needs cuda.h (in {include}; set CUDA_HOME) and a C compiler (cc, or $CC) to compare layouts")
    (tmp_path / "layout.c").write_text(LAYOUT_PROGRAM)
    subprocess.run([compiler, f"-I{include}", "-o", str(tmp_path / "layout"), str(tmp_path / "layout.c")],
                   check=True)
    c = json.loads(subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout)
    for struct in (CUlaunchConfig, CUlaunchAttribute):
        for name, _ in struct._fields_:
            if name != "pad":
                field = f"{struct.__name__}.{name}"
                assert [getattr(struct, name).offset, getattr(struct, name).size] == c[field], field
        assert ctypes.sizeof(struct) == c[f"sizeof {struct.__name__}"], struct.__name__
    assert ctypes.sizeof(CUlaunchAttributeValue) == c["sizeof CUlaunchAttributeValue"]
    cluster = CUlaunchAttributeValue.clusterDim.offset
    for d in "xyz":
        assert [cluster + getattr(CUclusterDim, d).offset, getattr(CUclusterDim, d).size] == \
            c[f"CUlaunchAttributeValue.clusterDim.{d}"], d
    assert CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION == c["CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION"]
    serialized = CUlaunchAttributeValue.programmaticStreamSerializationAllowed
    assert [serialized.offset, serialized.size] == \
        c["CUlaunchAttributeValue.programmaticStreamSerializationAllowed"]
    assert CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION == \
        c["CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION"]
