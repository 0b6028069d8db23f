"""Tests of apps/gemm/tensor_map.py: the driver's enumerators as cuda.h defines them, the arguments built from a
manifest's tensor map (innermost first, byte strides), the maps it refuses before calling the driver, and the call
itself through a stand-in for cuTensorMapEncodeTiled; on a machine with a GPU, an encoding by the real driver.
Run from the repository root: python3 -m unittest apps/gemm/test_tensor_map.py
"""
import ctypes
import os
import re
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensor_map  # noqa: E402
from tensor_map import TensorMapError, encode_tensor_map, encoding_arguments  # noqa: E402

CUDA_H = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda.h"


def cuda_enum(text: str, typedef: str) -> dict:
    """The enumerators of `typedef enum ... { ... } typedef;` in cuda.h, with their values."""
    body = re.search(r"typedef enum \w+ \{([^{}]*)\}\s*" + typedef + ";", text)
    assert body, f"cuda.h declares no enum {typedef}"
    values, value = {}, -1
    for item in re.sub(r"/\*.*?\*/|//[^\n]*", "", body.group(1), flags=re.S).split(","):
        if not item.strip():
            continue
        name, _, given = item.partition("=")
        value = int(given.strip(), 0) if given.strip() else value + 1
        values[name.strip()] = value
    return values


def a_map(**changes):
    entry = {"name": "A_map", "buffer": "A", "dtype": "f16", "extents": [3, 100, 64], "strides": [6400, 64, 1],
             "box": [1, 64, 64], "swizzle": 128}
    entry.update(changes)
    return entry


@unittest.skipUnless(CUDA_H.exists(), f"no {CUDA_H} to read the driver's enumerators from (set CUDA_HOME)")
class EnumeratorsMatchCudaH(unittest.TestCase):
    def setUp(self):
        self.text = CUDA_H.read_text()

    def test_data_types(self):
        types = cuda_enum(self.text, "CUtensorMapDataType")
        names = {"i32": "INT32", "f16": "FLOAT16", "f32": "FLOAT32", "f64": "FLOAT64", "bf16": "BFLOAT16"}
        for dtype, name in names.items():
            self.assertEqual(tensor_map.DATA_TYPES[dtype], types["CU_TENSOR_MAP_DATA_TYPE_" + name], dtype)
        self.assertEqual(set(tensor_map.DATA_TYPES), set(names))

    def test_swizzle_interleave_promotion_and_fill(self):
        swizzles = cuda_enum(self.text, "CUtensorMapSwizzle")
        for span, name in {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}.items():
            self.assertEqual(tensor_map.SWIZZLES[span], swizzles["CU_TENSOR_MAP_SWIZZLE_" + name])
        self.assertEqual(tensor_map.INTERLEAVE_NONE,
                         cuda_enum(self.text, "CUtensorMapInterleave")["CU_TENSOR_MAP_INTERLEAVE_NONE"])
        self.assertEqual(tensor_map.L2_PROMOTION_128B,
                         cuda_enum(self.text, "CUtensorMapL2promotion")["CU_TENSOR_MAP_L2_PROMOTION_L2_128B"])
        self.assertEqual(tensor_map.OOB_FILL_NONE,
                         cuda_enum(self.text, "CUtensorMapFloatOOBfill")["CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"])

    def test_map_size(self):
        self.assertIn("#define CU_TENSOR_MAP_NUM_QWORDS 16", self.text)
        self.assertEqual(ctypes.sizeof(tensor_map.CUtensorMap), tensor_map.CU_TENSOR_MAP_BYTES)
        self.assertRegex(self.text, r"alignas\(%d\)\s*\n?\s*#elif" % tensor_map.CU_TENSOR_MAP_BYTES)


class EncodingArguments(unittest.TestCase):
    def test_dimensions_innermost_first_with_byte_strides(self):
        args = encoding_arguments(a_map(), 0x7F0000001000)
        self.assertEqual(args.data_type, tensor_map.DATA_TYPES["f16"])
        self.assertEqual(args.rank, 3)
        self.assertEqual(args.address, 0x7F0000001000)
        self.assertEqual(list(args.dims[:3]), [64, 100, 3])
        self.assertEqual(list(args.strides[:2]), [128, 12800])
        self.assertEqual(list(args.box[:3]), [64, 64, 1])
        self.assertEqual(list(args.element_strides[:3]), [1, 1, 1])
        self.assertEqual(args.swizzle, tensor_map.SWIZZLES[128])
        self.assertEqual((args.interleave, args.l2_promotion, args.oob_fill),
                         (tensor_map.INTERLEAVE_NONE, tensor_map.L2_PROMOTION_128B, tensor_map.OOB_FILL_NONE))

    def test_refusals_name_the_map_and_the_rule(self):
        cases = [
            (a_map(box=[1, 257, 64]), "box dimension 1 is 257 elements, outside TMA's 1..256"),
            (a_map(box=[1, 64, 12], swizzle=0), "innermost row is 24 bytes, not a multiple of 16"),
            (a_map(box=[1, 64, 128], extents=[3, 100, 128], strides=[12800, 128, 1]),
             "256 bytes, wider than the 128-byte swizzle span"),
            (a_map(extents=[3, 100, 100], strides=[10000, 100, 1], box=[1, 64, 32]),
             "200 bytes apart from the next, not a multiple of 16"),
            (a_map(strides=[6400, 65, 1]), "not those of a dense row-major tensor"),
            (a_map(dtype="i8"), "TMA does not copy i8 elements"),
            (a_map(swizzle=16), "a swizzle spans 32, 64 or 128 bytes"),
            (a_map(box=[64, 64]), "the box has 2 dimensions and the tensor 3"),
            (a_map(extents=[0, 100, 64]), "extent 0 of dimension 0 is outside 1..2^32"),
        ]
        for entry, why in cases:
            with self.subTest(why=why):
                with self.assertRaises(TensorMapError) as raised:
                    encoding_arguments(entry, 0x1000)
                self.assertIn("tensor map 'A_map' over buffer 'A'", str(raised.exception))
                self.assertIn(why, str(raised.exception))
        with self.assertRaisesRegex(TensorMapError, "0x1008 is not 16-byte aligned"):
            encoding_arguments(a_map(), 0x1008)


# cuTensorMapEncodeTiled's prototype in cuda.h.
ENCODE_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                                    ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                    ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32), ctypes.c_int,
                                    ctypes.c_int, ctypes.c_int, ctypes.c_int)


class StandInDriver:
    """cuTensorMapEncodeTiled as a C callback that records what it received and marks the map it fills."""

    def __init__(self, result=0):
        self.calls = []

        def encode(map_address, data_type, rank, address, dims, strides, box, element_strides, interleave, swizzle,
                   l2_promotion, oob_fill):
            self.calls.append({"data_type": data_type, "rank": rank, "address": address,
                               "dims": dims[:rank], "strides": strides[:rank - 1], "box": box[:rank],
                               "element_strides": element_strides[:rank], "swizzle": swizzle,
                               "rest": (interleave, l2_promotion, oob_fill), "map_address": map_address})
            tensor_map.CUtensorMap.from_address(map_address).opaque[0] = 0xC0FFEE
            return result

        self.cuTensorMapEncodeTiled = ENCODE_PROTOTYPE(encode)
        self.cuGetErrorName = lambda result, name: 0


class EncodeThroughTheDriverCall(unittest.TestCase):
    def test_the_call_receives_the_arguments_and_fills_an_aligned_map(self):
        driver = StandInDriver()
        encoded = encode_tensor_map(a_map(), 0x7F0000001000, driver)
        (call,) = driver.calls
        self.assertEqual(call["data_type"], tensor_map.DATA_TYPES["f16"])
        self.assertEqual(call["rank"], 3)
        self.assertEqual(call["address"], 0x7F0000001000)
        self.assertEqual((call["dims"], call["strides"], call["box"]), ([64, 100, 3], [128, 12800], [64, 64, 1]))
        self.assertEqual(call["element_strides"], [1, 1, 1])
        self.assertEqual(call["swizzle"], tensor_map.SWIZZLES[128])
        self.assertEqual(call["rest"], (0, tensor_map.L2_PROMOTION_128B, 0))
        self.assertEqual(call["map_address"], encoded.pointer.value)
        self.assertEqual(encoded.pointer.value % 128, 0)
        self.assertEqual(encoded.map.opaque[0], 0xC0FFEE)
        self.assertEqual(encoded.name, "A_map")

    def test_a_refusal_by_the_driver_names_the_map(self):
        with self.assertRaisesRegex(RuntimeError, r"cuTensorMapEncodeTiled failed while encoding tensor map 'A_map'"):
            encode_tensor_map(a_map(), 0x1000, StandInDriver(result=1))

    def test_a_map_the_driver_would_refuse_never_reaches_it(self):
        driver = StandInDriver()
        with self.assertRaises(TensorMapError):
            encode_tensor_map(a_map(box=[1, 300, 64]), 0x1000, driver)
        self.assertEqual(driver.calls, [])


def real_driver():
    """libcuda with a current context and a device, or None with the reason."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, f"libcuda.so.1 cannot be loaded ({e})"
    count = ctypes.c_int()
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return None, "the driver sees no device"
    major = ctypes.c_int()
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, 0)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    if major.value < 9:
        return None, f"TMA needs compute capability 9.0, the GPU has {major.value}.x"
    return lib, ""


class EncodeOnTheGpu(unittest.TestCase):
    def test_the_driver_accepts_the_map(self):
        lib, reason = real_driver()
        if lib is None:
            self.skipTest(f"no GPU for TMA: {reason}")
        context, address = ctypes.c_void_p(), ctypes.c_uint64()
        self.assertEqual(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0), 0)
        self.assertEqual(lib.cuCtxSetCurrent(context), 0)
        self.assertEqual(lib.cuMemAlloc_v2(ctypes.byref(address), 3 * 100 * 64 * 2), 0)
        try:
            encoded = encode_tensor_map(a_map(), address.value, lib)
            self.assertNotEqual(bytes(encoded.map), bytes(tensor_map.CU_TENSOR_MAP_BYTES))
        finally:
            lib.cuMemFree_v2(address)


if __name__ == "__main__":
    unittest.main()
