"""Tests of the twist package. The ones that need the C++ extension module skip, saying so, where it is not
importable; CTest runs them with the build tree's package on PYTHONPATH, where it always is."""
import importlib.util
import os
import sys
from pathlib import Path

# Without an installed package, the sources (python/twist) still give twist.runtime and twist.torch_ops.
if importlib.util.find_spec("twist") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# CTest builds the extension module before it runs these tests, so there a missing module is a failure, not a
# reason to skip (python/CMakeLists.txt sets this).
if os.environ.get("TWIST_EXTENSION_REQUIRED") == "1":
    import twist._twist  # noqa: F401
