"""twist from Python: the DSL, the associativity checker, schedules, lowering, the CPU oracle and interpreter
over NumPy arrays, and compiling and exporting kernels, all from the C++ library (the extension module
twist._twist); and twist.runtime / twist.tensor_map / twist.torch_ops, pure Python, which run exported kernels
(with their TMA tensor maps) as PyTorch ops.

    import twist
    from twist import algebra, f32
    rows, cols = twist.SizeParam("rows"), twist.SizeParam("cols")
    x = twist.Input("X", f32, [rows, cols])
    i, r = twist.Var("i"), twist.RDom([(0, cols)], "r")
    lse = twist.Func("LSE")
    lse[i] = twist.reduce(algebra.log_sum_exp(f32), r, x[i, r.x])
    lse.set_shape([rows])

python/tests/test_online_softmax.py is a complete example, from a twisted monoid to CUDA source.
"""
from __future__ import annotations

try:
    from . import _twist
    from ._twist import *  # noqa: F401,F403  (the DSL's names, as the C++ library has them)
    from ._twist import algebra  # noqa: F401
    _MISSING = None
    # `from twist import *` leaves Python's own min, max, abs and pow alone: use twist.max and the others.
    __all__ = sorted({name for name in dir(_twist) if not name.startswith("_")} - {"min", "max", "abs", "pow"}
                     | {"evaluate", "interpret"})
except ImportError as error:  # the runtime below works without the extension; the DSL needs it
    _twist = None
    _MISSING = error


def __getattr__(name: str):
    if _MISSING is not None:
        # An AttributeError, as the module protocol asks (hasattr and pickling probe attributes), with the reason.
        raise AttributeError(f"twist.{name} needs twist's C++ extension module (twist._twist), which is not "
                          f"importable here ({_MISSING}). Install the package from the repository with "
                          "scripts/install-python-package.sh (README, 'The two commands'); twist.runtime, "
                          "twist.tensor_map and twist.torch_ops work without it.")
    raise AttributeError(f"module 'twist' has no attribute '{name}'")


def _float64_arrays(arrays: dict) -> dict:
    import numpy as np
    return {name: np.ascontiguousarray(a, dtype=np.float64) for name, a in arrays.items()}


def evaluate(func, inputs: dict, scalars: dict | None = None, arithmetic: str = "exact") -> list:
    """The algorithm oracle (backends/reference/evaluate_funcs.h): `func` evaluated point by point from its
    definition over its shape (Func.set_shape), one float64 array per value of the func. Inputs are NumPy
    arrays by input name, rounded to each input's element type first; `arithmetic` is "exact" (double),
    "extended" (long double) or "typed" (every operation rounded to its declared type)."""
    return list(_twist._evaluate(func, _float64_arrays(inputs), dict(scalars or {}), arithmetic))


def interpret(program, inputs: dict, scalars: dict | None = None, check_races: bool = True) -> dict:
    """Runs a lowered program on the CPU interpreter (backends/reference/interpreter/interpreter.h) as the GPU
    would, thread by thread in lockstep, each value rounded to its declared type. Returns the outputs by name as
    float64 arrays (holding values of the outputs' element types exactly). Size parameters are bound from the
    inputs' shapes; `scalars` gives the other parameters."""
    return dict(_twist._interpret(program, _float64_arrays(inputs), dict(scalars or {}), check_races))
