"""The library's GEMM from Python: its tensor-core schedule lowered and interpreted against NumPy, and its SIMT
schedule moved onto a contraction of one's own with Schedule.set_like (apps/gemm/gemm.h says what must match)."""
import pytest

pytest.importorskip("twist._twist", reason="twist's C++ extension module is not built")
import numpy as np  # noqa: E402
import twist  # noqa: E402
from twist import algebra, apps, f16, f32  # noqa: E402


def test_the_librarys_tensor_core_gemm_on_the_interpreter_matches_numpy():
    g = apps.make_gemm(input=f16, output=f32, prefix="py_tc_")
    tiling = apps.GemmTiling()
    tiling.block_m, tiling.block_n, tiling.block_k, tiling.warp_m, tiling.warp_n = 64, 64, 32, 32, 32
    program = twist.lower(g.out, apps.schedule_tensor_core(g, tiling), twist.Target.sm90a())
    assert any("mma.sync" in source for source in program.cuda_sources().values())
    rng = np.random.default_rng(4)
    a = rng.normal(size=(70, 40)).astype(np.float16)
    b = rng.normal(size=(40, 50)).astype(np.float16)
    got = twist.interpret(program, {"py_tc_A": a, "py_tc_B": b})["py_tc_out"]
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6


def test_the_simt_schedule_applies_to_a_users_contraction_through_set_like():
    g = apps.make_gemm(input=f16, output=f32, prefix="py_lib_")
    rows, cols, depth = twist.SizeParam("py_rows"), twist.SizeParam("py_cols"), twist.SizeParam("py_depth")
    x, w = twist.Input("py_X", f16, [rows, depth]), twist.Input("py_W", f16, [depth, cols])
    i, j = twist.Var("i"), twist.Var("j")
    k = twist.RDom([(0, depth)], g.k.name)  # the library's reduction loop is named after its domain
    y = twist.Func("py_Y")
    y[i, j] = twist.reduce(algebra.sum(f32), k, twist.cast(f32, x[i, k.x]) * twist.cast(f32, w[k.x, j]))
    y.set_shape([rows, cols])
    s = twist.Schedule()
    s.set_like(y, apps.schedule_simt(g).find(g.C.name))
    program = twist.lower(y, s, twist.Target.sm80())
    rng = np.random.default_rng(5)
    xa = rng.normal(size=(33, 21)).astype(np.float16)
    wa = rng.normal(size=(21, 45)).astype(np.float16)
    got = twist.interpret(program, {"py_X": xa, "py_W": wa})["py_Y"]
    want = xa.astype(np.float64) @ wa.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6
