"""Exported twist kernels as PyTorch custom ops (torch.library), callable from code that torch.compile compiles.

    import twist.torch_ops
    gemm = twist.torch_ops.register_manifest("out/gemm_f16_4096.json")   # -> torch.ops.twist.gemm_f16_4096
    c = gemm(a, b)                                                        # inputs in the manifest's order

Each op takes the manifest's inputs (role "input") as tensors, in the manifest's order, and returns its outputs
(one tensor, or a tuple). An exported program is compiled for fixed shapes, so the op checks every input's shape
and dtype against the manifest and names what differs. The fake (meta) implementation gives outputs of the
manifest's shapes and dtypes, which is what torch.compile traces through; the CUDA implementation launches the
kernels (twist.runtime) on PyTorch's current stream, with no synchronization, so it overlaps like any other op.
"""
from __future__ import annotations

import re

from .runtime import FLOAT_DTYPES, LoadedKernels, Manifest, ManifestError, device_description, load_manifest, \
    torch_dtype

NAMESPACE = "twist"


def op_name(manifest: Manifest) -> str:
    """The op's name: the manifest's label with every character that an op name cannot hold made '_'."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", manifest.label)
    return name if re.match(r"[A-Za-z_]", name) else "op_" + name


def op_schema(manifest: Manifest) -> str:
    """The op's schema in TorchScript's notation, e.g. "(Tensor A, Tensor B) -> Tensor"."""
    inputs = manifest.with_role("input")
    outputs = manifest.with_role("output")
    if not outputs:
        raise ManifestError(f"{manifest.path}: no buffer has role 'output', so the op would return nothing")
    for b in inputs:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", b.name):
            raise ManifestError(f"{manifest.path}: input '{b.name}' is not a valid argument name for a PyTorch op")
    arguments = ", ".join(f"Tensor {b.name}" for b in inputs)
    returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join("Tensor" for _ in outputs) + ")"
    return f"({arguments}) -> {returns}"


def check_inputs(manifest: Manifest, tensors) -> None:
    """Raises ValueError naming the first input whose shape or dtype is not the manifest's."""
    inputs = manifest.with_role("input")
    if len(tensors) != len(inputs):
        raise ValueError(f"{manifest.label} takes {len(inputs)} tensors ({', '.join(b.name for b in inputs)}), "
                         f"not {len(tensors)}")
    for b, t in zip(inputs, tensors):
        if tuple(t.shape) != b.shape or t.dtype != torch_dtype(b.dtype):
            raise ValueError(f"{manifest.label}: input '{b.name}' is {t.dtype} of shape {tuple(t.shape)}, but the "
                             f"kernels were exported for {torch_dtype(b.dtype)} of shape {b.shape}; export them "
                             "again for this shape (twist export, or twist.export_program)")


class _Launcher:
    """The CUDA implementation of one manifest's op: the kernels loaded once per device, launched per call on
    freshly allocated outputs and workspaces.

    A call is on the host path of every decode step, where a kernel runs for tens of microseconds, so what does
    not change between calls is made once: the inputs' expected shapes and dtypes, the other buffers' allocations,
    and (in LoadedKernels) the parameters packed for each set of buffer addresses."""

    def __init__(self, manifest: Manifest):
        import torch
        self.manifest = manifest
        self.loaded: dict[int, LoadedKernels] = {}
        self._expected = [(torch.Size(b.shape), torch_dtype(b.dtype)) for b in manifest.with_role("input")]
        # The buffers in the manifest's order (the order of the addresses LoadedKernels.pack takes): the index of
        # each input among the op's arguments, or how to allocate an output or workspace. A zeroed workspace (the
        # arrival counters of a split whose last block folds the parts) must start at zero; the kernels leave it
        # so, but a fresh allocation is not.
        inputs = [b.name for b in manifest.with_role("input")]
        self._buffers = [(inputs.index(b.name), None, None) if b.role == "input" else
                         (None, torch.zeros if b.zeroed else torch.empty,
                          {"size": b.shape, "dtype": torch_dtype(b.dtype)})
                         for b in manifest.buffers]
        self._outputs = [i for i, b in enumerate(manifest.buffers) if b.role == "output"]

    def _load(self, device) -> LoadedKernels:
        import torch
        if device.type != "cuda":
            raise ValueError(f"{self.manifest.label}: the inputs are on {device}; twist's kernels run on CUDA "
                             "tensors")
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in self.loaded:
            self.loaded[index] = LoadedKernels(self.manifest, index, device_description(device))
        return self.loaded[index]

    def __call__(self, *tensors):
        import torch
        if len(tensors) != len(self._expected) or any(t.shape != shape or t.dtype != dtype
                                                      for t, (shape, dtype) in zip(tensors, self._expected)):
            check_inputs(self.manifest, tensors)  # raises, naming the input that differs
        device = tensors[0].device
        kernels = self.loaded.get(device.index) or self._load(device)
        buffers = [tensors[i].contiguous() if i is not None else allocate(**size_dtype, device=device)
                   for i, allocate, size_dtype in self._buffers]
        packed = kernels.pack(tuple(t.data_ptr() for t in buffers))
        kernels.launch(packed, torch.cuda.current_stream(device).cuda_stream, wait=False)
        if len(self._outputs) == 1:
            return buffers[self._outputs[0]]
        return tuple(buffers[i] for i in self._outputs)


def _fake(manifest: Manifest):
    def fake(*tensors):
        import torch
        check_inputs(manifest, tensors)
        outputs = [torch.empty(b.shape, dtype=torch_dtype(b.dtype), device=tensors[0].device)
                   for b in manifest.with_role("output")]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
    return fake


_LIBRARIES: dict[str, object] = {}  # torch.library.Library objects must outlive their ops


def register_manifest(manifest: Manifest | str, name: str | None = None):
    """Registers the manifest's kernels as torch.ops.twist.<name> (by default op_name(manifest)) with a CUDA
    and a fake implementation; returns the op. Needs PyTorch 2.4 or newer (torch.library.register_fake)."""
    import torch
    if not isinstance(manifest, Manifest):
        manifest = load_manifest(manifest)
    name = name or op_name(manifest)
    if name in _LIBRARIES:
        raise ValueError(f"an op torch.ops.{NAMESPACE}.{name} is registered already; give register_manifest a "
                         "name of its own")
    library = torch.library.Library(NAMESPACE, "FRAGMENT")
    library.define(name + op_schema(manifest))
    library.impl(name, _Launcher(manifest), "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", _fake(manifest), lib=library)
    _LIBRARIES[name] = library
    return getattr(getattr(torch.ops, NAMESPACE), name)


__all__ = ["FLOAT_DTYPES", "check_inputs", "op_name", "op_schema", "register_manifest"]
