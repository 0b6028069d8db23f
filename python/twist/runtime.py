"""twist's runtime for exported kernels: pure Python over the CUDA driver API (ctypes), nothing to build.

It loads the kernels that twist exported ahead of time (`twist export`, or twist.export_program from Python; see
backends/cuda/program/export_program.h) from their JSON launch manifest into the CUDA context that PyTorch
uses, and launches them on PyTorch's tensors and stream: as a Program (fixed buffers, for benchmarks that time
them next to PyTorch's own kernels) or as a torch.library custom op (twist.torch_ops), which torch.compile can
call.

A manifest names the buffers (name, dtype, shape, role) and the kernels to launch in order (cubin, grid, block,
thread-block cluster, dynamic shared memory, arguments in the kernel's parameter order: buffers as device
pointers, scalars by value, TMA tensor maps as CUtensorMaps encoded over their buffers at launch; see
twist.tensor_map). A kernel in clusters other than 1x1x1, or one that waits for the kernels before it itself
("dependent_launch": launched with programmatic stream serialization, so that its launch overlaps their end), is
launched with cuLaunchKernelEx, the others with cuLaunchKernel. Reading and checking manifests and packing arguments need neither a GPU nor PyTorch, and are
tested without either (python/tests, apps/gemm/test_bench_support.py); torch is imported only where tensors are
made.
"""
from __future__ import annotations

import ctypes
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .tensor_map import TensorMap, TensorMapError, encode_tensor_map, encoding_arguments

# The manifest's element type names (lang/types.cpp) and the torch dtypes that hold them.
TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i32": "int32"}
FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})
# How a scalar argument of each type is passed by value to cuLaunchKernel.
SCALAR_CTYPES = {"i32": ctypes.c_int32, "f32": ctypes.c_float, "f64": ctypes.c_double}
ROLES = ("input", "output", "workspace")

# A kernel may use this much dynamic shared memory without opting in; above it, cuFuncSetAttribute must
# raise the kernel's limit first or the launch fails.
DEFAULT_DYNAMIC_SHARED_BYTES = 48 * 1024
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
# CUresults after which the context is corrupt: every later CUDA call in the process fails the same way, so a
# benchmark must stop instead of going on to the next kernel (cuda.h: ILLEGAL_ADDRESS, LAUNCH_TIMEOUT, ASSERT,
# HARDWARE_STACK_ERROR, ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS, INVALID_ADDRESS_SPACE, INVALID_PC,
# LAUNCH_FAILED).
STICKY_CUDA_ERRORS = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})


class ManifestError(ValueError):
    """A manifest that cannot be launched as written; the message names the file and the field."""


class CudaError(RuntimeError):
    """A failed CUDA driver call. `sticky` says whether the context is lost (see STICKY_CUDA_ERRORS)."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code
        self.sticky = code in STICKY_CUDA_ERRORS


class OutputNotWritten(RuntimeError):
    """An output still holds NaN after the kernels ran: some element was never written (or computed as NaN)."""


@dataclass(frozen=True)
class BufferSpec:
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str
    # A workspace the kernels expect to hold zeros when they start (the arrival counters of a split whose last
    # block combines the parts) and leave zeroed again when they finish: zeroed once when allocated, never
    # poisoned.
    zeroed: bool = False


@dataclass(frozen=True)
class BufferArg:
    name: str


@dataclass(frozen=True)
class ScalarArg:
    name: str
    dtype: str
    value: float


@dataclass(frozen=True)
class TensorMapArg:
    name: str  # a key of the kernel's tensor_maps


NO_CLUSTER = (1, 1, 1)
# The most blocks per cluster that every GPU with clusters launches without opting in (cuFuncSetAttribute's
# CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED).
PORTABLE_CLUSTER_BLOCKS = 8


@dataclass(frozen=True)
class KernelSpec:
    name: str
    cubin: Path
    grid: tuple[int, int, int]
    block: int
    shared_bytes: int
    registers: int
    spill_bytes: int
    args: tuple[BufferArg | ScalarArg | TensorMapArg, ...]
    cluster: tuple[int, int, int] = NO_CLUSTER
    # The manifest's "tensor_maps" entries by name, as twist.tensor_map.encode_tensor_map takes them.
    tensor_maps: dict[str, dict] = field(default_factory=dict)
    # The buffers the kernel addresses with 64-bit offsets (the manifest's "wide_offsets"; absent: none).
    wide_offsets: tuple[str, ...] = ()
    # The kernel begins with griddepcontrol.wait (the manifest's "dependent_launch"; absent: false).
    dependent_launch: bool = False


@dataclass(frozen=True)
class Manifest:
    path: Path
    label: str
    arch: str
    notes: dict[str, str]  # every other top-level string: op, dtype, output, shape, schedule, accumulation, ...
    buffers: tuple[BufferSpec, ...]
    kernels: tuple[KernelSpec, ...]

    def buffer(self, name: str) -> BufferSpec:
        for b in self.buffers:
            if b.name == name:
                return b
        raise ManifestError(f"{self.path}: no buffer named '{name}' (it has {', '.join(b.name for b in self.buffers)})")

    def with_role(self, role: str) -> list[BufferSpec]:
        return [b for b in self.buffers if b.role == role]


def _field(obj: dict, key: str, kind: type | tuple[type, ...], where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise ManifestError(f"{where}: missing field '{key}'")
    value = obj[key]
    # bool is an int in Python; a manifest never means true where it writes a number.
    if isinstance(value, bool) or not isinstance(value, kind):
        expected = " or ".join(t.__name__ for t in (kind if isinstance(kind, tuple) else (kind,)))
        raise ManifestError(f"{where}: field '{key}' is {value!r}, expected {expected}")
    return value


def _count(obj: dict, key: str, where: str, minimum: int = 0) -> int:
    value = _field(obj, key, int, where)
    if value < minimum:
        raise ManifestError(f"{where}: field '{key}' is {value}, expected at least {minimum}")
    return value


def _dtype(value: str, known, where: str) -> str:
    if value not in known:
        raise ManifestError(f"{where}: unknown dtype '{value}' (expected one of {', '.join(sorted(known))})")
    return value


def _scalar(arg: dict, where: str) -> ScalarArg:
    name = _field(arg, "scalar", str, where)
    dtype = _dtype(_field(arg, "dtype", str, where), SCALAR_CTYPES, f"{where} (scalar '{name}')")
    value = _field(arg, "value", (int, float), where)
    if dtype == "i32" and (not -(2**31) <= value < 2**31 or value != int(value)):
        raise ManifestError(f"{where}: scalar '{name}' is i32 but its value {value} is not a 32-bit integer")
    return ScalarArg(name, dtype, int(value) if dtype == "i32" else float(value))


# The largest element offset the generated kernels' 32-bit offsets reach (as the C++ runtime's
# check_offsets_fit): a buffer of more elements needs the kernel to address it in 64 bits ("wide_offsets").
MAX_32_BIT_OFFSET = 2**31 - 1


def _wide_offsets(kernel: dict, args: list, by_name: dict, where: str) -> tuple[str, ...]:
    """The kernel's "wide_offsets", each one of its buffer arguments; raises ManifestError, as the C++ runtime
    refuses the launch, for a buffer argument past MAX_32_BIT_OFFSET elements that is not among them."""
    wide = kernel.get("wide_offsets", [])
    buffers = [a.name for a in args if isinstance(a, BufferArg)]
    if not isinstance(wide, list) or not all(isinstance(w, str) and w in buffers for w in wide):
        raise ManifestError(f"{where}: wide_offsets {wide!r} must name buffers the kernel takes ({', '.join(buffers)})")
    for name in buffers:
        b = by_name[name]
        elements = math.prod(b.shape)
        if elements > MAX_32_BIT_OFFSET and name not in wide:
            raise ManifestError(
                f"{where}: {b.role} buffer '{name}' of shape [{', '.join(map(str, b.shape))}] has {elements} elements, "
                f"past the {MAX_32_BIT_OFFSET} that the generated kernel's 32-bit offsets reach; export it with a "
                "twist that addresses such buffers in 64 bits, or split the call (fewer batches or heads per launch)")
    return tuple(wide)


def _dependent_launch(kernel: dict, where: str) -> bool:
    value = kernel.get("dependent_launch", False)
    if not isinstance(value, bool):
        raise ManifestError(f"{where}: dependent_launch {value!r} must be true or false")
    return value


def _cluster(kernel: dict, grid: list, where: str) -> tuple[int, int, int]:
    cluster = kernel.get("cluster", list(NO_CLUSTER))
    if (not isinstance(cluster, list) or len(cluster) != 3
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in cluster)):
        raise ManifestError(f"{where}: cluster {cluster!r} must be three positive integers")
    if any(g % c for g, c in zip(grid, cluster)):
        raise ManifestError(f"{where}: grid {grid} is not a whole number of clusters {cluster} in every dimension, "
                            "which cuLaunchKernelEx requires; export the kernel again")
    if math.prod(cluster) > PORTABLE_CLUSTER_BLOCKS:
        raise ManifestError(f"{where}: clusters of {cluster} blocks exceed the portable limit of "
                            f"{PORTABLE_CLUSTER_BLOCKS} blocks per cluster (as the C++ runtime does, the launcher "
                            "does not opt into larger ones); export the kernel with a smaller cluster")
    return tuple(cluster)


def _tensor_maps(kernel: dict, buffers: dict[str, BufferSpec], where: str) -> dict[str, dict]:
    """The kernel's tensor maps by name, each checked as the driver will check it (at address 0: the buffer's own
    address is checked when it is encoded) and against the buffer it maps."""
    maps = {}
    for i, entry in enumerate(_field(kernel, "tensor_maps", list, where) if "tensor_maps" in kernel else []):
        at = f"{where}: tensor_maps[{i}]"
        name = _field(entry, "name", str, at)
        buffer = buffers.get(_field(entry, "buffer", str, at))
        if buffer is None:
            raise ManifestError(f"{at} ('{name}'): buffer '{entry['buffer']}' is not among the manifest's buffers")
        if name in maps:
            raise ManifestError(f"{at}: tensor map '{name}' is declared twice")
        try:
            encoding_arguments(entry, 0)
        except TensorMapError as e:
            raise ManifestError(f"{at}: {e}") from e
        if entry["dtype"] != buffer.dtype:
            raise ManifestError(f"{at} ('{name}'): the map reads {entry['dtype']} elements but buffer "
                                f"'{buffer.name}' holds {buffer.dtype}")
        elements = math.prod(entry["extents"])
        if elements != math.prod(buffer.shape):
            raise ManifestError(f"{at} ('{name}'): extents {entry['extents']} cover {elements} elements but buffer "
                                f"'{buffer.name}' of shape {list(buffer.shape)} has {math.prod(buffer.shape)}; a "
                                "map may only regroup the buffer's dimensions")
        maps[name] = entry
    return maps


def parse_manifest(data: dict, path: Path) -> Manifest:
    """Checks a manifest's JSON object field by field; cubin paths are resolved against the manifest's folder."""
    where = str(path)
    label = _field(data, "label", str, where)
    arch = _field(data, "arch", str, where)
    notes = {k: v for k, v in data.items() if k not in ("label", "arch", "buffers", "kernels") and isinstance(v, str)}
    buffers = []
    for i, b in enumerate(_field(data, "buffers", list, where)):
        at = f"{where}: buffers[{i}]"
        name = _field(b, "name", str, at)
        dtype = _dtype(_field(b, "dtype", str, at), TORCH_DTYPES, f"{at} ('{name}')")
        shape = _field(b, "shape", list, at)
        if not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in shape):
            raise ManifestError(f"{at} ('{name}'): shape {shape} must be non-negative integers")
        role = _field(b, "role", str, at)
        if role not in ROLES:
            raise ManifestError(f"{at} ('{name}'): role '{role}' is none of {', '.join(ROLES)}")
        if any(other.name == name for other in buffers):
            raise ManifestError(f"{at}: buffer '{name}' is declared twice")
        zeroed = b.get("zeroed", False)
        if not isinstance(zeroed, bool) or (zeroed and role != "workspace"):
            raise ManifestError(f"{at} ('{name}'): 'zeroed' is true or false, and only a workspace is zeroed")
        buffers.append(BufferSpec(name, dtype, tuple(shape), role, zeroed))
    by_name = {b.name: b for b in buffers}
    kernels = []
    for i, k in enumerate(_field(data, "kernels", list, where)):
        at = f"{where}: kernels[{i}]"
        name = _field(k, "name", str, at)
        at = f"{at} ('{name}')"
        cubin = path.parent / _field(k, "cubin", str, at)
        if not cubin.is_file():
            raise ManifestError(f"{at}: cubin {cubin} does not exist; export the manifest again with its cubins")
        grid = _field(k, "grid", list, at)
        if len(grid) != 3 or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 0 for g in grid):
            raise ManifestError(f"{at}: grid {grid} must be three non-negative integers")
        tensor_maps = _tensor_maps(k, by_name, at)
        args = []
        for j, a in enumerate(_field(k, "args", list, at)):
            arg_at = f"{at}: args[{j}]"
            if isinstance(a, dict) and "buffer" in a:
                buffer = _field(a, "buffer", str, arg_at)
                if buffer not in by_name:
                    raise ManifestError(f"{arg_at}: buffer '{buffer}' is not among the manifest's buffers")
                args.append(BufferArg(buffer))
            elif isinstance(a, dict) and "scalar" in a:
                args.append(_scalar(a, arg_at))
            elif isinstance(a, dict) and "tensor_map" in a:
                map_name = _field(a, "tensor_map", str, arg_at)
                if map_name not in tensor_maps:
                    raise ManifestError(f"{arg_at}: tensor map '{map_name}' is not among the kernel's tensor_maps "
                                        f"({', '.join(tensor_maps) or 'it has none'})")
                args.append(TensorMapArg(map_name))
            else:
                raise ManifestError(f"{arg_at}: {a!r} is neither a buffer, a scalar nor a tensor map argument")
        kernels.append(KernelSpec(name, cubin, tuple(grid), _count(k, "block", at, 1), _count(k, "shared_bytes", at),
                                  _count(k, "registers", at), _count(k, "spill_bytes", at), tuple(args),
                                  _cluster(k, grid, at), tensor_maps, _wide_offsets(k, args, by_name, at),
                                  _dependent_launch(k, at)))
    if not kernels:
        raise ManifestError(f"{where}: no kernels to launch")
    return Manifest(path, label, arch, notes, tuple(buffers), tuple(kernels))


def load_manifest(path: str | Path) -> Manifest:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ManifestError(f"cannot read manifest {path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path} is not JSON ({e}); is it a twist launch manifest?") from e
    return parse_manifest(data, path)


def find_manifests(directory: str | Path, op: str) -> list[Manifest]:
    """Every manifest in `directory` whose "op" note is `op`, by file name. Any .json there must be a manifest."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ManifestError(f"{directory} is not a directory; export the manifests first (bench/export_gemm_suite.sh)")
    found = [m for m in (load_manifest(p) for p in sorted(directory.glob("*.json"))) if m.notes.get("op") == op]
    if not found:
        raise ManifestError(f"{directory} holds no manifests with \"op\": \"{op}\"; export them first "
                            f"(bench/export_gemm_suite.sh)")
    return found


class PackedArgs:
    """A kernel's parameters as cuLaunchKernel takes them: an array of pointers, each to one parameter's value
    (a ctypes scalar, or an encoded TensorMap). The values are kept here, so the array stays valid as long as
    this object lives."""

    def __init__(self, values: list[ctypes._SimpleCData | TensorMap]):
        self.values = values
        self.array = (ctypes.c_void_p * max(len(values), 1))(
            *[v.pointer.value if isinstance(v, TensorMap) else ctypes.addressof(v) for v in values])


# cuLaunchKernelEx's launch configuration (cuda.h's CUlaunchConfig, CUlaunchAttribute and the union of attribute
# values, of which only clusterDim and programmaticStreamSerializationAllowed are set here);
# python/tests/test_runtime.py checks the layouts against cuda.h.
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class CUclusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class CUlaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", CUclusterDim),
                ("programmaticStreamSerializationAllowed", ctypes.c_int)]


class CUlaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(CUlaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def needs_extended_launch(kernel: KernelSpec) -> bool:
    """Whether `kernel` is launched with cuLaunchKernelEx: in clusters, or dependently."""
    return kernel.cluster != NO_CLUSTER or kernel.dependent_launch


class ExtendedLaunch:
    """The cuLaunchKernelEx configuration of a kernel launched in thread-block clusters or with programmatic
    stream serialization, made once per loaded kernel; each launch copies it and sets the stream."""

    def __init__(self, kernel: KernelSpec):
        attributes = []
        if kernel.cluster != NO_CLUSTER:
            cluster = CUlaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
            cluster.value.clusterDim = CUclusterDim(*kernel.cluster)
            attributes.append(cluster)
        if kernel.dependent_launch:
            dependent = CUlaunchAttribute(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            dependent.value.programmaticStreamSerializationAllowed = 1
            attributes.append(dependent)
        self.attributes = (CUlaunchAttribute * len(attributes))(*attributes)
        self.config = CUlaunchConfig(*kernel.grid, kernel.block, 1, 1, kernel.shared_bytes, None,
                                     ctypes.cast(self.attributes, ctypes.POINTER(CUlaunchAttribute)),
                                     len(attributes))


def describe_cuda_failure(call: str, code: int, name: str, text: str, what: str) -> str:
    hint = " The CUDA context is now unusable; later CUDA calls in this process will fail." \
        if code in STICKY_CUDA_ERRORS else ""
    return f"{call} failed with {name} ({code}: {text}) while {what}.{hint}"


class _Driver:
    """The few driver API calls the launcher needs, through ctypes, each checked."""

    def __init__(self):
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise CudaError(f"cannot load libcuda.so.1 ({e}); the launcher needs the NVIDIA driver", -1) from e
        p, i, u, ptr = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER
        signatures = {
            "cuInit": [u],
            "cuDeviceGet": [ptr(i), i],
            "cuDevicePrimaryCtxRetain": [ptr(p), i],
            "cuCtxGetCurrent": [ptr(p)],
            "cuCtxSetCurrent": [p],
            "cuModuleLoadData": [ptr(p), p],
            "cuModuleUnload": [p],
            "cuModuleGetFunction": [ptr(p), p, ctypes.c_char_p],
            "cuFuncSetAttribute": [p, i, i],
            "cuLaunchKernel": [p, u, u, u, u, u, u, u, p, ptr(p), ptr(p)],
            "cuLaunchKernelEx": [ptr(CUlaunchConfig), p, ptr(p), ptr(p)],
            "cuStreamSynchronize": [p],
            "cuGetErrorName": [i, ptr(ctypes.c_char_p)],
            "cuGetErrorString": [i, ptr(ctypes.c_char_p)],
        }
        for name, argtypes in signatures.items():
            f = getattr(lib, name, None)
            if f is None:
                raise CudaError(f"libcuda.so.1 has no {name}; the launcher needs a driver for CUDA 12.0 or newer", -1)
            f.argtypes, f.restype = argtypes, ctypes.c_int
            setattr(self, name, f)
        self.lib = lib  # for twist.tensor_map's encoder
        self.contexts: dict[int, int] = {}
        self.check(self.cuInit(0), "cuInit", "initializing the driver")

    def check(self, result: int, call: str, what: str) -> None:
        if result == 0:
            return
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self.cuGetErrorName(result, ctypes.byref(name))
        self.cuGetErrorString(result, ctypes.byref(text))
        raise CudaError(describe_cuda_failure(call, result, (name.value or b"?").decode(errors="replace"),
                                              (text.value or b"unknown error").decode(errors="replace"), what), result)

    def use_primary_context(self, ordinal: int) -> None:
        """Makes device `ordinal`'s primary context, the one PyTorch's runtime allocates in, current here."""
        if ordinal not in self.contexts:
            device, context = ctypes.c_int(), ctypes.c_void_p()
            self.check(self.cuDeviceGet(ctypes.byref(device), ordinal), "cuDeviceGet", f"finding device {ordinal}")
            self.check(self.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain",
                       f"retaining the primary context of device {ordinal}")
            self.contexts[ordinal] = context.value  # retained for the process's life, as PyTorch holds it
        current = ctypes.c_void_p()
        self.check(self.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent", "reading the current context")
        if current.value == self.contexts[ordinal]:
            return
        if current.value is not None:
            raise CudaError(f"another CUDA context than device {ordinal}'s primary context is current on this thread, "
                            "so kernels loaded here would not see PyTorch's memory; pop it before launching", -1)
        self.check(self.cuCtxSetCurrent(self.contexts[ordinal]), "cuCtxSetCurrent",
                   f"making the primary context of device {ordinal} current")


_DRIVER: _Driver | None = None


def _driver() -> _Driver:
    global _DRIVER
    if _DRIVER is None:
        _DRIVER = _Driver()
    return _DRIVER


def torch_dtype(name: str):
    import torch
    return getattr(torch, TORCH_DTYPES[name])


@dataclass
class _Loaded:
    spec: KernelSpec
    module: ctypes.c_void_p
    function: ctypes.c_void_p
    description: str  # for error messages, made once so that timed launches do not format it
    extended_launch: ExtendedLaunch | None  # None: launched with cuLaunchKernel
    # cuLaunchKernel's arguments before the stream, made once so that a launch only adds the stream and parameters
    # (`function` is the handle object cuModuleGetFunction fills, so it may be filled after this is made).
    dimensions: tuple = field(init=False)

    def __post_init__(self):
        s = self.spec
        self.dimensions = (self.function, *s.grid, s.block, 1, 1, s.shared_bytes)


def kernel_parameters(kernel: KernelSpec, addresses: dict[str, int], libcuda=None) -> PackedArgs:
    """The parameters one launch of `kernel` passes, in the manifest's order, given each buffer's device address:
    buffers' addresses, scalars' values, and each tensor map encoded over its buffer's address by libcuda's
    cuTensorMapEncodeTiled (libcuda.so.1 when None; the driver needs a current context)."""

    def address(buffer: str, use: str) -> int:
        if buffer not in addresses:
            raise ValueError(f"kernel '{kernel.name}' {use}, but no device address was given for buffer "
                                f"'{buffer}' (given: {', '.join(addresses) or 'none'})")
        return addresses[buffer]

    values = []
    for a in kernel.args:
        if isinstance(a, BufferArg):
            values.append(ctypes.c_uint64(address(a.name, f"reads buffer '{a.name}'")))
        elif isinstance(a, ScalarArg):
            values.append(SCALAR_CTYPES[a.dtype](a.value))
        else:
            entry = kernel.tensor_maps[a.name]
            buffer = address(entry["buffer"], f"maps buffer '{entry['buffer']}' with tensor map '{a.name}'")
            values.append(encode_tensor_map(entry, buffer, libcuda))
    return PackedArgs(values)


class PackedArgsCache:
    """The packed parameters of a manifest's kernels by the buffers' device addresses, each set of addresses packed
    once. A custom op's calls mostly get the same addresses again (its weights, and outputs in the blocks PyTorch's
    caching allocator hands back), and encoding a tensor map takes tens of microseconds of Python (50 us a map on
    the development host), as long as a decode-sized kernel runs. A set of addresses is a tuple in the order of
    `buffers` (the manifest's buffer names), so that a call that hits builds no dict and sorts nothing; the key is
    every address the parameters hold, so a hit can never launch on another tensor's memory. The driver copies the
    parameters at each launch, so a set in use may be evicted; the `capacity` most recently used sets are kept."""

    def __init__(self, kernels: list[KernelSpec], buffers: list[str], libcuda=None, capacity: int = 64):
        self._kernels, self.buffers, self._libcuda, self.capacity = kernels, tuple(buffers), libcuda, capacity
        self._packed: dict[tuple[int, ...], list[PackedArgs]] = {}

    def __call__(self, addresses: tuple[int, ...]) -> list[PackedArgs]:
        packed = self._packed.pop(addresses, None)
        if packed is None:
            if len(addresses) != len(self.buffers):
                raise ValueError(f"{len(addresses)} buffer addresses given for the {len(self.buffers)} buffers "
                                 f"{', '.join(self.buffers)}")
            named = dict(zip(self.buffers, addresses))
            packed = [kernel_parameters(k, named, self._libcuda) for k in self._kernels]
            if len(self._packed) >= self.capacity:
                del self._packed[next(iter(self._packed))]  # the least recently used: dicts keep insertion order
        self._packed[addresses] = packed
        return packed


class LoadedKernels:
    """A manifest's kernels loaded into the primary context of one device, the one PyTorch allocates in.

    launch() takes the parameters per launch (kernel_parameters), so one loaded manifest serves every call of
    a custom op on new tensors; Program packs them once for its fixed buffers."""

    def __init__(self, manifest: Manifest, device_index: int, device_name: str):
        self.manifest = manifest
        self._driver = _driver()
        self._driver.use_primary_context(device_index)
        self._device_name = device_name
        self.kernels: list[_Loaded] = []
        try:
            for spec in manifest.kernels:
                self.kernels.append(self._load(spec))
        except BaseException:
            self.close()
            raise
        self._packed = PackedArgsCache(manifest.kernels, [b.name for b in manifest.buffers], self._driver.lib)

    def _load(self, spec: KernelSpec) -> _Loaded:
        d, label = self._driver, self.manifest.label
        image = spec.cubin.read_bytes()
        module = ctypes.c_void_p()
        d.check(d.cuModuleLoadData(ctypes.byref(module), ctypes.create_string_buffer(image, len(image))),
                "cuModuleLoadData",
                f"loading {spec.cubin} (kernel '{spec.name}' of {label}, compiled for {self.manifest.arch}) on "
                f"{self._device_name}")
        in_clusters = spec.cluster != NO_CLUSTER
        cluster = f", clusters {spec.cluster[0]}x{spec.cluster[1]}x{spec.cluster[2]}" if in_clusters else ""
        description = (f"kernel '{spec.name}' of {label} (grid {spec.grid[0]}x{spec.grid[1]}x{spec.grid[2]}{cluster}, "
                       f"block {spec.block}, {spec.shared_bytes} bytes of dynamic shared memory)")
        loaded = _Loaded(spec, module, ctypes.c_void_p(), description,
                         ExtendedLaunch(spec) if needs_extended_launch(spec) else None)
        try:
            d.check(d.cuModuleGetFunction(ctypes.byref(loaded.function), module, spec.name.encode()),
                    "cuModuleGetFunction", f"looking up kernel '{spec.name}' in {spec.cubin}")
            if spec.shared_bytes > DEFAULT_DYNAMIC_SHARED_BYTES:
                d.check(d.cuFuncSetAttribute(loaded.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             spec.shared_bytes), "cuFuncSetAttribute",
                        f"opting {description} into its dynamic shared memory (more than the device "
                        "allows per block? use smaller tiles or fewer stages)")
        except BaseException:
            d.cuModuleUnload(module)
            raise
        return loaded

    def pack(self, addresses: tuple[int, ...]) -> list[PackedArgs]:
        """The kernels' parameters over the buffers at `addresses`, in the manifest's buffer order."""
        return self._packed(addresses)

    def launch(self, packed: list[PackedArgs], stream: int, wait: bool) -> None:
        """Queues every kernel on `stream` (a CUstream handle; 0 is the legacy default stream); with wait,
        waits for each and raises naming the kernel that failed."""
        d = self._driver
        for k, args in zip(self.kernels, packed):
            if 0 in k.spec.grid:
                continue  # an empty output: nothing to compute (the C++ runner skips these too)
            if k.extended_launch is None:
                call = "cuLaunchKernel"
                result = d.cuLaunchKernel(*k.dimensions, stream, args.array, None)
            else:
                call = "cuLaunchKernelEx"
                # A copy per launch, so that launches on other streams from other threads do not race on it.
                config = CUlaunchConfig.from_buffer_copy(k.extended_launch.config)
                config.hStream = stream
                result = d.cuLaunchKernelEx(ctypes.byref(config), k.function, args.array, None)
            if result:
                d.check(result, call, "launching " + k.description)
            if wait:
                d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize", "running " + k.description)

    def close(self) -> None:
        """Unloads the modules; the caller makes sure that no launch still queued uses them."""
        kernels, self.kernels = self.kernels, []
        for k in kernels:
            self._driver.check(self._driver.cuModuleUnload(k.module), "cuModuleUnload",
                               f"unloading the module of kernel '{k.spec.name}' of {self.manifest.label}")


def device_description(device) -> str:
    import torch
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (sm_{major}{minor})"


class Program:
    """A manifest's kernels loaded into PyTorch's CUDA context, with one torch tensor per buffer in `tensors`.

    Fill the inputs in place (`program.tensors["A"].copy_(a)`): the kernels' arguments hold the tensors'
    addresses, so replacing a tensor in the dict would not reach them. Use as a context manager, so the modules
    are unloaded when done.
    """

    def __init__(self, manifest: Manifest, device: str = "cuda"):
        import torch
        self.manifest = manifest
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.tensors = {b.name: (torch.zeros if b.zeroed else torch.empty)(b.shape, dtype=torch_dtype(b.dtype),
                                                                            device=self.device)
                        for b in manifest.buffers}
        # The allocations above created PyTorch's context on the device, so it can be made current here.
        self._loaded: LoadedKernels | None = LoadedKernels(manifest, self.device.index,
                                                           device_description(self.device))
        self._packed = self._loaded.pack(tuple(self.tensors[b.name].data_ptr() for b in manifest.buffers))

    def launch(self) -> None:
        """Queues every kernel on PyTorch's current stream, without poisoning or waiting: what is timed."""
        import torch
        self._loaded.launch(self._packed, torch.cuda.current_stream(self.device).cuda_stream, wait=False)

    def run(self) -> dict:
        """Poisons outputs and workspaces, runs every kernel to completion (checking each), and returns the
        outputs; raises OutputNotWritten if a float output still holds a NaN."""
        import torch
        for b in self.manifest.buffers:
            if b.role != "input" and not b.zeroed:
                # NaN in every float format; integers cannot hold one, so integer buffers get -1 and no check.
                self.tensors[b.name].fill_(float("nan") if b.dtype in FLOAT_DTYPES else -1)
        self._loaded.launch(self._packed, torch.cuda.current_stream(self.device).cuda_stream, wait=True)
        outputs = {}
        for b in self.manifest.with_role("output"):
            t = self.tensors[b.name]
            if b.dtype in FLOAT_DTYPES:
                nans = int(torch.isnan(t).sum().item())
                if nans:
                    raise OutputNotWritten(f"{self.manifest.label}: output '{b.name}' holds {nans} NaN(s) of "
                                           f"{t.numel()} after its kernels ran: elements left unwritten (outputs "
                                           "are poisoned with NaN first) or computed as NaN")
            outputs[b.name] = t
        return outputs

    def close(self) -> None:
        import torch
        if self._loaded is None:
            return
        if self._loaded.kernels:
            # Queued launches may still use the modules.
            torch.cuda.synchronize(self.device)
        loaded, self._loaded = self._loaded, None
        loaded.close()

    def _close_after(self, error: BaseException) -> None:
        # The error being raised says more than a failure to clean up after it (after a sticky error every CUDA
        # call fails), so such a failure is attached to it as a note instead of replacing it.
        try:
            self.close()
        except Exception as cleanup:
            error.add_note(f"(cleaning up {self.manifest.label} failed too: {cleanup})")

    def __enter__(self) -> Program:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is None:
            self.close()
        else:
            self._close_after(error)
