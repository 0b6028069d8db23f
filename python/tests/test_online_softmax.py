"""The issue's example, end to end from Python: online softmax written as a twisted monoid, checked for
associativity, a row-wise reduction over it scheduled, lowered, printed as CUDA, run on the CPU interpreter and
compared with NumPy."""
import math

import pytest

pytest.importorskip("twist._twist", reason="twist's C++ extension module is not built")
import numpy as np  # noqa: E402
import twist  # noqa: E402
from twist import algebra, f32  # noqa: E402


def online_softmax():
    """(m, l): the running max and l = sum exp(s - m), transported from the plain (max, +) by
    psi(m, l; r) = (m, l * e^(m - r)) with the reference r = max(a.m, b.m), the larger max, so that every
    rescale factor is at most 1. A state whose max is -inf holds no element, so its rescale is 0, not NaN."""
    def rescale(m, r):
        return twist.select(m == twist.neg_infinity(f32), 0, twist.exp(m - r))

    base = algebra.product_of([algebra.max(f32), algebra.sum(f32)], ["m", "l"])
    return (twist.TwistBuilder("online_softmax", base)
            .state([("m", f32), ("l", f32)])
            .elements([("s", f32)])
            .identity([twist.neg_infinity(f32), 0.0])
            # A masked score (-inf) holds no element, as the identity does: its l is 0.
            .lift(lambda x: [x["s"], twist.cast(f32, twist.select(x["s"] == twist.neg_infinity(f32), 0.0, 1.0))])
            .reference(f32, lambda a, b: twist.max(a["m"], b["m"]))
            .to_base(lambda s, r: [s["m"], s["l"] * rescale(s["m"], r)])
            .from_base(lambda b, r: [b["m"], twist.select(b["m"] == twist.neg_infinity(f32), 0,
                                                          b["l"] * twist.exp(r - b["m"]))])
            .finalize([("lse", f32)], lambda s: [s["m"] + twist.log(s["l"])])
            .build())


def test_online_softmax_as_a_twisted_monoid_from_the_checker_to_the_interpreter():
    monoid = online_softmax()
    assert monoid.twisted
    verdict = twist.check_associativity(monoid)
    print(verdict)
    assert verdict.accepted, str(verdict)
    assert verdict.level == 1, verdict.level_name

    rows, cols = twist.SizeParam("rows"), twist.SizeParam("cols")
    x = twist.Input("X", f32, [rows, cols])
    i, r = twist.Var("i"), twist.RDom([(0, cols)], "r")
    lse = twist.Func("LSE")
    lse[i] = twist.reduce(monoid, r, x[i, r.x])
    lse.set_shape([rows])
    print(lse.describe())

    schedule = twist.Schedule()
    schedule[lse].split("i", "io", "it", 32).bind("io", twist.Binding.block_x).bind("it", twist.Binding.thread) \
        .split("r.x", "ro", "ri", 4)
    print(schedule)
    program = twist.lower(lse, schedule, twist.Target.sm90a())
    print(program.loop_nest())
    sources = program.cuda_sources()
    assert len(sources) == 1
    source = next(iter(sources.values()))
    print(source)
    assert "__global__" in source

    data = np.random.default_rng(3).normal(0, 3, size=(45, 37)).astype(np.float32)
    got = twist.interpret(program, {"X": data})["LSE"]
    m = data.astype(np.float64).max(axis=1)
    want = m + np.log(np.exp(data.astype(np.float64) - m[:, None]).sum(axis=1))
    assert got.shape == (45,)
    assert np.max(np.abs(got - want)) < 1e-5 * max(1.0, float(np.max(np.abs(want))))
    # The softmax itself from the reduction: every row sums to 1.
    probabilities = np.exp(data - got[:, None])
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    # The oracle (the algorithm without a schedule) agrees too.
    oracle = twist.evaluate(lse, {"X": data})[0]
    assert np.max(np.abs(oracle - want)) < 1e-5 * max(1.0, float(np.max(np.abs(want))))
    assert math.isfinite(float(got.sum()))
