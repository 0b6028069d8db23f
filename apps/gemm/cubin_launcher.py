"""Launches the kernels that `twist export` wrote ahead of time, from their JSON launch manifest, in the CUDA
context that PyTorch uses, so that a benchmark can run them on PyTorch's tensors and stream and time them next
to torch.matmul with the same method.

A manifest (see apps/twist/export_program.cpp) names the buffers (name, dtype, shape, role) and the kernels to
launch in order (cubin, grid, block, dynamic shared memory, arguments in the kernel's parameter order: buffers as
device pointers, scalars by value). Reading and checking manifests and packing arguments need neither a GPU nor
PyTorch, and are tested without either (apps/gemm/test_bench_support.py); torch is imported only by Program.
"""
from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass
from pathlib import Path

from tensor_map import encode_tensor_map

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
    """A CUtensorMap parameter: the manifest kernel's "tensor_maps" entry of that name, encoded at load time
    over its buffer's address (apps/gemm/tensor_map.py)."""
    name: str


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
    tensor_maps: tuple[dict, ...] = ()


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
        buffers.append(BufferSpec(name, dtype, tuple(shape), role))
    names = {b.name for b in buffers}
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
        args = []
        for j, a in enumerate(_field(k, "args", list, at)):
            arg_at = f"{at}: args[{j}]"
            if isinstance(a, dict) and "buffer" in a:
                buffer = _field(a, "buffer", str, arg_at)
                if buffer not in names:
                    raise ManifestError(f"{arg_at}: buffer '{buffer}' is not among the manifest's buffers")
                args.append(BufferArg(buffer))
            elif isinstance(a, dict) and "scalar" in a:
                args.append(_scalar(a, arg_at))
            elif isinstance(a, dict) and "tensor_map" in a:
                map_name = _field(a, "tensor_map", str, arg_at)
                if not any(m.get("name") == map_name for m in k.get("tensor_maps", [])):
                    raise ManifestError(f"{arg_at}: tensor map '{map_name}' is not among the kernel's tensor_maps")
                args.append(TensorMapArg(map_name))
            else:
                raise ManifestError(f"{arg_at}: {a!r} is neither a buffer, a scalar nor a tensor map argument")
        kernels.append(KernelSpec(name, cubin, tuple(grid), _count(k, "block", at, 1), _count(k, "shared_bytes", at),
                                  _count(k, "registers", at), _count(k, "spill_bytes", at), tuple(args),
                                  tuple(k.get("tensor_maps", []))))
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
    """A kernel's parameters as cuLaunchKernel takes them: an array of pointers, each to one parameter's value.
    The values are kept here, so the array stays valid as long as this object lives."""

    def __init__(self, kernel: KernelSpec, addresses: dict[str, int]):
        self.values = []
        pointers = []
        for a in kernel.args:
            if isinstance(a, TensorMapArg):
                entry = next(m for m in kernel.tensor_maps if m["name"] == a.name)
                encoded = encode_tensor_map(entry, addresses[entry["buffer"]])
                self.values.append(encoded)
                pointers.append(encoded.pointer)
                continue
            if isinstance(a, BufferArg):
                self.values.append(ctypes.c_uint64(addresses[a.name]))
            else:
                self.values.append(SCALAR_CTYPES[a.dtype](a.value))
            pointers.append(ctypes.cast(ctypes.pointer(self.values[-1]), ctypes.c_void_p))
        self.array = (ctypes.c_void_p * max(len(pointers), 1))(*pointers)


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
            "cuStreamSynchronize": [p],
            "cuGetErrorName": [i, ptr(ctypes.c_char_p)],
            "cuGetErrorString": [i, ptr(ctypes.c_char_p)],
        }
        for name, argtypes in signatures.items():
            f = getattr(lib, name)
            f.argtypes, f.restype = argtypes, ctypes.c_int
            setattr(self, name, f)
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
    args: PackedArgs
    description: str  # for error messages, made once so that timed launches do not format it


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
        self.tensors = {b.name: torch.empty(b.shape, dtype=torch_dtype(b.dtype), device=self.device)
                        for b in manifest.buffers}
        self._driver = _driver()
        # The allocations above created PyTorch's context on the device, so it can be made current here.
        self._driver.use_primary_context(self.device.index)
        addresses = {name: t.data_ptr() for name, t in self.tensors.items()}
        self._kernels: list[_Loaded] = []
        try:
            for spec in manifest.kernels:
                self._kernels.append(self._load(spec, addresses))
        except BaseException as e:
            self._close_after(e)
            raise

    def _load(self, spec: KernelSpec, addresses: dict[str, int]) -> _Loaded:
        d, label = self._driver, self.manifest.label
        image = spec.cubin.read_bytes()
        module = ctypes.c_void_p()
        d.check(d.cuModuleLoadData(ctypes.byref(module), ctypes.create_string_buffer(image, len(image))),
                "cuModuleLoadData",
                f"loading {spec.cubin} (kernel '{spec.name}' of {label}, compiled for {self.manifest.arch}) on "
                f"{self._device_name()}")
        description = (f"kernel '{spec.name}' of {label} (grid {spec.grid[0]}x{spec.grid[1]}x{spec.grid[2]}, block "
                       f"{spec.block}, {spec.shared_bytes} bytes of dynamic shared memory)")
        loaded = _Loaded(spec, module, ctypes.c_void_p(), PackedArgs(spec, addresses), description)
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

    def _device_name(self) -> str:
        import torch
        major, minor = torch.cuda.get_device_capability(self.device)
        return f"{torch.cuda.get_device_name(self.device)} (sm_{major}{minor})"

    def launch(self) -> None:
        """Queues every kernel on PyTorch's current stream, without poisoning or waiting: what is timed."""
        import torch
        stream = ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)
        self._launch_all(stream, wait=False)

    def run(self) -> dict:
        """Poisons outputs and workspaces, runs every kernel to completion (checking each), and returns the
        outputs; raises OutputNotWritten if a float output still holds a NaN."""
        import torch
        for b in self.manifest.buffers:
            if b.role != "input":
                # NaN in every float format; integers cannot hold one, so integer buffers get -1 and no check.
                self.tensors[b.name].fill_(float("nan") if b.dtype in FLOAT_DTYPES else -1)
        stream = ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream)
        self._launch_all(stream, wait=True)
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

    def _launch_all(self, stream: ctypes.c_void_p, wait: bool) -> None:
        d = self._driver
        for k in self._kernels:
            s = k.spec
            if 0 in s.grid:
                continue  # an empty output: nothing to compute (the C++ runner skips these too)
            result = d.cuLaunchKernel(k.function, s.grid[0], s.grid[1], s.grid[2], s.block, 1, 1, s.shared_bytes,
                                      stream, k.args.array, None)
            if result:
                d.check(result, "cuLaunchKernel", "launching " + k.description)
            if wait:
                d.check(d.cuStreamSynchronize(stream), "cuStreamSynchronize", "running " + k.description)

    def close(self) -> None:
        import torch
        if self._kernels:
            # Queued launches may still use the modules.
            torch.cuda.synchronize(self.device)
        for k in self._kernels:
            self._driver.check(self._driver.cuModuleUnload(k.module), "cuModuleUnload",
                               f"unloading the module of kernel '{k.spec.name}' of {self.manifest.label}")
        self._kernels = []

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
