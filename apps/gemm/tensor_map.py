"""TMA tensor maps (CUtensorMap) for kernels launched from an AOT manifest, encoded with the driver's
cuTensorMapEncodeTiled through ctypes, the way the C++ runtime encodes them (backends/cuda/runtime/tensor_map.cpp).

A manifest's kernel lists its maps under "tensor_maps" (apps/twist/export_program.cpp):
    {"name": "A_map", "buffer": "A", "dtype": "f16", "extents": [M, K], "strides": [K, 1], "box": [64, 64],
     "swizzle": 128}
with dimension 0 outermost and the swizzle span in bytes (0 for none); its "args" hold {"tensor_map": "A_map"}
where the kernel takes the map (by value, after the buffers and scalars). Out-of-bounds elements read as zero,
no interleave, 128-byte L2 promotion, as the C++ runtime does.

encoding_arguments() builds and checks the driver's arguments without a GPU; encode_tensor_map() calls the driver.
"""
from __future__ import annotations

import ctypes

# cuda.h's enumerators (CUtensorMapDataType, CUtensorMapSwizzle, ...), checked against the header by
# apps/gemm/test_tensor_map.py.
DATA_TYPES = {"i32": 3, "f16": 6, "f32": 7, "f64": 8, "bf16": 9}
ELEMENT_BYTES = {"i32": 4, "f16": 2, "f32": 4, "f64": 8, "bf16": 2}
SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}  # span in bytes -> CU_TENSOR_MAP_SWIZZLE_NONE, _32B, _64B, _128B
INTERLEAVE_NONE = 0  # CU_TENSOR_MAP_INTERLEAVE_NONE
L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B
OOB_FILL_NONE = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as zero
CUDA_SUCCESS = 0
MAX_RANK = 5
CU_TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap), which cuda.h also aligns to 128 bytes


class TensorMapError(ValueError):
    """A tensor map the driver would refuse; the message names the map, its extents, box and swizzle."""


class CUtensorMap(ctypes.Structure):
    _fields_ = [("opaque", ctypes.c_uint64 * 16)]


class EncodingArguments(ctypes.Structure):
    """cuTensorMapEncodeTiled's arguments after the map itself, dimension 0 innermost."""
    _fields_ = [
        ("data_type", ctypes.c_int),
        ("rank", ctypes.c_uint32),
        ("address", ctypes.c_uint64),
        ("dims", ctypes.c_uint64 * MAX_RANK),
        ("strides", ctypes.c_uint64 * (MAX_RANK - 1)),  # bytes, for dimensions 1..rank-1
        ("box", ctypes.c_uint32 * MAX_RANK),
        ("element_strides", ctypes.c_uint32 * MAX_RANK),
        ("interleave", ctypes.c_int),
        ("swizzle", ctypes.c_int),
        ("l2_promotion", ctypes.c_int),
        ("oob_fill", ctypes.c_int),
    ]


def describe(entry: dict) -> str:
    swizzle = entry.get("swizzle", 0)
    return (f"tensor map '{entry.get('name')}' over buffer '{entry.get('buffer')}' ({entry.get('dtype')}, extents "
            f"{entry.get('extents')}, box {entry.get('box')}, swizzle {f'{swizzle}B' if swizzle else 'none'})")


def encoding_arguments(entry: dict, address: int) -> EncodingArguments:
    """The driver's arguments for a manifest's tensor map over the buffer at device address `address`; raises
    TensorMapError when the driver would refuse them (the rules of cuTensorMapEncodeTiled in cuda.h)."""
    what = describe(entry)

    def refuse(why: str):
        raise TensorMapError(f"{what}: {why}")

    dtype, extents, box = entry.get("dtype"), list(entry.get("extents", [])), list(entry.get("box", []))
    swizzle = entry.get("swizzle", 0)
    if dtype not in DATA_TYPES:
        refuse(f"TMA does not copy {dtype} elements here; the known types are {sorted(DATA_TYPES)}")
    if swizzle not in SWIZZLES:
        refuse(f"a swizzle spans 32, 64 or 128 bytes (or 0 for none), not {swizzle}")
    if not 1 <= len(extents) <= MAX_RANK:
        refuse(f"TMA tensors have 1 to {MAX_RANK} dimensions, this one has {len(extents)}")
    if len(box) != len(extents):
        refuse(f"the box has {len(box)} dimensions and the tensor {len(extents)}")
    if address % 16:
        refuse(f"its address {address:#x} is not 16-byte aligned, which TMA requires")
    for d, (extent, size) in enumerate(zip(extents, box)):
        if not 1 <= extent <= 1 << 32:
            refuse(f"extent {extent} of dimension {d} is outside 1..2^32")
        if not 1 <= size <= 256:
            refuse(f"box dimension {d} is {size} elements, outside TMA's 1..256")
    element_bytes = ELEMENT_BYTES[dtype]
    row_bytes = box[-1] * element_bytes
    if row_bytes % 16:
        refuse(f"the box's innermost row is {row_bytes} bytes, not a multiple of 16")
    if swizzle and row_bytes > swizzle:
        refuse(f"the box's innermost row is {row_bytes} bytes, wider than the {swizzle}-byte swizzle span")
    strides = [1] * len(extents)
    for d in range(len(extents) - 2, -1, -1):
        strides[d] = strides[d + 1] * extents[d + 1]
    if list(entry.get("strides", strides)) != strides:
        refuse(f"its strides {entry['strides']} are not those of a dense row-major tensor ({strides})")

    args = EncodingArguments(data_type=DATA_TYPES[dtype], rank=len(extents), address=address,
                             interleave=INTERLEAVE_NONE, swizzle=SWIZZLES[swizzle],
                             l2_promotion=L2_PROMOTION_128B, oob_fill=OOB_FILL_NONE)
    for i, d in enumerate(reversed(range(len(extents)))):  # innermost first
        args.dims[i], args.box[i], args.element_strides[i] = extents[d], box[d], 1
        if i > 0:
            stride_bytes = strides[d] * element_bytes
            if stride_bytes % 16:
                refuse(f"a row of dimension {d} is {stride_bytes} bytes apart from the next, not a multiple of 16")
            if stride_bytes >= 1 << 40:
                refuse(f"the stride of dimension {d} is {stride_bytes} bytes, at or past TMA's 2^40")
            args.strides[i - 1] = stride_bytes
    return args


class TensorMap:
    """An encoded map in 128-byte aligned host memory (as cuda.h aligns CUtensorMap); pass `pointer` in the
    kernel's argument array where the manifest's args say {"tensor_map": name}."""

    def __init__(self, name: str):
        self.name = name
        self._storage = ctypes.create_string_buffer(2 * CU_TENSOR_MAP_BYTES)
        start = ctypes.addressof(self._storage)
        self.map = CUtensorMap.from_address(start + (-start % CU_TENSOR_MAP_BYTES))
        self.pointer = ctypes.c_void_p(ctypes.addressof(self.map))


def encode_tensor_map(entry: dict, address: int, libcuda: ctypes.CDLL | None = None) -> TensorMap:
    """The manifest's tensor map `entry` over the device buffer at `address`, encoded by the driver (libcuda, by
    default loaded as libcuda.so.1, with a current context). Raises TensorMapError before calling the driver when
    it would refuse the map, and RuntimeError naming the map and the driver's error when it refuses it anyway."""
    args = encoding_arguments(entry, address)
    libcuda = libcuda or ctypes.CDLL("libcuda.so.1")
    encode = libcuda.cuTensorMapEncodeTiled
    encode.restype = ctypes.c_int
    encode.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                       ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
                       ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    encoded = TensorMap(entry["name"])
    result = encode(encoded.pointer, args.data_type, args.rank, ctypes.c_void_p(args.address), args.dims,
                    args.strides, args.box, args.element_strides, args.interleave, args.swizzle, args.l2_promotion,
                    args.oob_fill)
    if result != CUDA_SUCCESS:
        name = ctypes.c_char_p()
        libcuda.cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"cuTensorMapEncodeTiled failed while encoding {describe(entry)}: "
                           f"{(name.value or b'CUresult %d' % result).decode()}; check the map against the buffer's "
                           f"shape and the rules of cuTensorMapEncodeTiled in cuda.h")
    return encoded
