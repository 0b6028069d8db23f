"""A stand-in for libcuda's cuTensorMapEncodeTiled, for the tests of twist.tensor_map and of the runtime's
argument packing without a GPU: a C callback with cuda.h's prototype that records what it received and marks the
map it fills."""
import ctypes

from twist.tensor_map import CUtensorMap

# cuTensorMapEncodeTiled's prototype in cuda.h.
ENCODE_PROTOTYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p,
                                    ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64),
                                    ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32), ctypes.c_int,
                                    ctypes.c_int, ctypes.c_int, ctypes.c_int)
# What the stand-in writes into the first word of each map it encodes.
ENCODED_MARK = 0xC0FFEE


class StandInDriver:
    """Records each call's arguments in `calls`; returns `result` (0 is CUDA_SUCCESS)."""

    def __init__(self, result=0):
        self.calls = []

        def encode(map_address, data_type, rank, address, dims, strides, box, element_strides, interleave, swizzle,
                   l2_promotion, oob_fill):
            self.calls.append({"data_type": data_type, "rank": rank, "address": address,
                               "dims": dims[:rank], "strides": strides[:rank - 1], "box": box[:rank],
                               "element_strides": element_strides[:rank], "swizzle": swizzle,
                               "rest": (interleave, l2_promotion, oob_fill), "map_address": map_address})
            CUtensorMap.from_address(map_address).opaque[0] = ENCODED_MARK
            return result

        self.cuTensorMapEncodeTiled = ENCODE_PROTOTYPE(encode)
        self.cuGetErrorName = lambda result, name: 0
