"""The bindings of the pipelines' realization (compute_at, compute_root, the realization printout), the checker's
level 4 (derive_monoid) and the library's attention and norms, each against NumPy or an exact answer."""
import math

import pytest

pytest.importorskip("twist._twist", reason="twist's C++ extension module is not built")
import numpy as np  # noqa: E402
import twist  # noqa: E402
from twist import algebra, apps, f16, f32, f64  # noqa: E402


def rmsnorm(hidden):
    rows = twist.SizeParam("rows")
    x, w = twist.Input("px", f32, [rows, hidden]), twist.Input("pw", f32, [hidden])
    i, j, r = twist.Var("i"), twist.Var("j"), twist.RDom([(0, hidden)], "pr")
    ss, y = twist.Func("pss"), twist.Func("py")
    ss[i] = twist.reduce(algebra.sum(f32), r, x[i, r.x] * x[i, r.x])
    y[i, j] = x[i, j] * twist.rsqrt(ss[i] / float(hidden) + 1e-6) * w[j]
    y.set_shape([rows, hidden])
    return ss, y


@pytest.mark.parametrize("realize, kernels", [("compute_at", 1), ("compute_root", 2)])
def test_a_row_statistic_computed_at_its_consumer_or_as_a_stage_matches_numpy(realize, kernels):
    ss, y = rmsnorm(96)
    s = twist.Schedule()
    if realize == "compute_at":
        s[ss].compute_at(y, "i")
    else:
        s[ss].compute_root()
    assert ("computed at py loop i" if realize == "compute_at" else "compute_root") in twist.realization(y, s)
    program = twist.lower(y, s, twist.Target.sm90a())
    assert len(program.kernels) == kernels
    rng = np.random.default_rng(11)
    xs, ws = rng.normal(size=(5, 96)).astype(np.float32), rng.normal(size=96).astype(np.float32)
    got = twist.interpret(program, {"px": xs, "pw": ws})["py"]
    x64 = xs.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * ws
    assert np.max(np.abs(got - want)) < 1e-5 * np.max(np.abs(want))


def test_an_affine_fold_derives_a_monoid_whose_split_reduction_equals_the_loop():
    d = twist.derive_monoid("py_digits", state=[("v", f64)], elements=[("d", f64)], initial=[0.0],
                            step=lambda s, x: [s["v"] * 10.0 + x["d"]])
    assert d.verdict.accepted and d.verdict.level == 5
    rows, cols = twist.SizeParam("rows"), twist.SizeParam("cols")
    digits = twist.Input("py_D", f64, [rows, cols])
    i, r = twist.Var("i"), twist.RDom([(0, cols)], "r")
    number = twist.Func("py_number")
    number[i] = twist.reduce(d.monoid, r, digits[i, r.x])
    number.set_shape([rows])
    s = twist.Schedule()
    s[number].split("r.x", "ro", "ri", 2).split_reduction("ro", 3)
    data = np.array([[1, 2, 3, 4, 5, 6, 7], [9, 0, 0, 0, 0, 0, 1]], dtype=np.float64)
    got = twist.interpret(twist.lower(number, s, twist.Target.sm90a()), {"py_D": data})["py_number"]
    assert got.tolist() == [1234567.0, 9000001.0]


def test_a_fold_that_is_not_rightward_is_refused_with_a_counterexample():
    d = twist.derive_monoid("py_discounted", state=[("h", f64)], elements=[("x", f64)], initial=[-np.inf],
                            step=lambda s, x: [twist.max(s["h"], x["x"]) - 1.0],
                            weak_right_inverse=lambda s: [[s["h"] + 1.0]])
    assert not d.verdict.accepted and d.verdict.counterexample is not None


def test_the_librarys_attention_and_rmsnorm_on_the_interpreter_match_numpy():
    rng = np.random.default_rng(12)
    a = apps.make_attention(dtype=f16, head_dim=64, prefix="pya_")
    t = apps.AttentionTiling()
    t.block_rows, t.key_tile = 32, 32
    program = twist.lower(a.out, apps.schedule_attention(a, t), twist.Target.sm90a())
    q, k, v = (rng.normal(size=(1, 1, n, 64)).astype(np.float16) for n in (20, 40, 40))
    got = twist.interpret(program, {"pya_Q": q, "pya_K": k, "pya_V": v},
                          scalars={a.qk_scale: math.log2(math.e) / 8.0})["pya_out"]
    logits = q.astype(np.float64) @ np.swapaxes(k.astype(np.float64), -1, -2) / 8.0
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    want = (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3

    n = apps.make_norm("rmsnorm", dtype=f16, hidden=128, prefix="pyn_")
    program = twist.lower(n.out, apps.schedule_norm(n), twist.Target.sm90a())
    xs, ws = rng.normal(size=(3, 128)).astype(np.float16), rng.normal(size=128).astype(np.float16)
    got = twist.interpret(program, {"pyn_x": xs, "pyn_w": ws})["pyn_rmsnorm"]
    x64 = xs.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + 1e-6) * ws.astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3
    with pytest.raises(twist.Error, match="rmsnorm"):
        apps.make_norm("rms_norm")
