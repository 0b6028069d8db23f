"""The bindings against independent references: the checker's verdicts (a proof, and a refusal with its
counterexample), the oracle and the interpreter against NumPy, NVRTC compilation and export, and errors that
reach Python as twist.Error with the C++ message."""
import json
import os
import subprocess

import pytest

pytest.importorskip("twist._twist", reason="twist's C++ extension module is not built")
import numpy as np  # noqa: E402
import twist  # noqa: E402
from twist import algebra, f16, f32  # noqa: E402
from twist.runtime import load_manifest  # noqa: E402


def mean_monoid():
    return (twist.MonoidBuilder("py_mean")
            .state([("n", f32), ("sum", f32)])
            .elements([("x", f32)])
            .identity([0.0, 0.0])
            .combine(lambda a, b: [a[0] + b[0], a[1] + b[1]])
            .lift(lambda x: [1.0, x[0]])
            .finalize([("mean", f32)], lambda s: [s[1] / s[0]])
            .build())


def test_the_checker_proves_the_library_and_tests_a_users_monoid():
    builtin = twist.check_associativity(algebra.sum(f32))
    assert builtin.accepted and builtin.level == 1
    mean = twist.check_associativity(mean_monoid())
    assert mean.accepted, str(mean)
    assert mean.level in (2, 3)  # a user's monoid is proved by Halide or tested, not trusted


def test_bitwise_operators_on_integers():
    i32 = twist.i32
    xor = (twist.MonoidBuilder("py_xor").state([("v", i32)]).identity([0])
           .combine(lambda a, b: [a[0] ^ b[0]]).build())
    assert twist.check_associativity(xor)
    masked = (twist.MonoidBuilder("py_or_masked").state([("v", i32)]).identity([0])
              .combine(lambda a, b: [(a[0] | b[0]) & 255]).build())
    assert not twist.check_associativity(masked)  # identity 0 is not neutral for values above a byte
    shifted = (twist.MonoidBuilder("py_shift").state([("v", i32)]).identity([0])
               .combine(lambda a, b: [((a[0] << 1) >> 1) + ~b[0]]).build())
    assert shifted.name == "py_shift"  # shifts and ~ of i32 type-check


def test_commutativity_has_a_verdict_of_its_own():
    assert twist.check_commutativity(algebra.sum(f32))
    first = (twist.MonoidBuilder("py_first_nonzero").state([("v", f32)]).identity([0.0])
             .combine(lambda a, b: [twist.select(a[0] != 0.0, a[0], b[0])]).build())
    assert twist.check_associativity(first)
    verdict = twist.check_commutativity(first)
    assert not verdict
    assert verdict.counterexample is not None
    assert "NOT accepted as commutative" in str(verdict)


def test_a_non_associative_monoid_is_refused_with_a_counterexample():
    difference = (twist.MonoidBuilder("py_difference").state([("v", f32)]).identity([0.0])
                  .combine(lambda a, b: [a[0] - b[0]]).build())
    verdict = twist.check_associativity(difference)
    assert not verdict.accepted
    assert not verdict
    assert verdict.counterexample is not None
    assert "py_difference" in str(verdict)


def gemm():
    """C = A @ B. Its inputs go out of scope here: the func keeps them alive, as it must for lowering."""
    m, n, k = twist.SizeParam("M"), twist.SizeParam("N"), twist.SizeParam("K")
    a, b = twist.Input("A", f16, [m, k]), twist.Input("B", f16, [k, n])
    i, j, r = twist.Var("i"), twist.Var("j"), twist.RDom([(0, k)], "k")
    c = twist.Func("C")
    c[i, j] = twist.reduce(algebra.sum(f32), r, twist.cast(f32, a[i, r.x]) * twist.cast(f32, b[r.x, j]))
    c.set_shape([m, n])
    return c


def simt_schedule(c):
    s = twist.Schedule()
    s[c].tile("i", "j", "io", "jo", "ii", "ji", 32, 32).split("ii", "it", "ir", 4).split("ji", "jt", "jr", 4) \
        .split("k.x", "ko", "ki", 8).reorder(["jr", "ir", "ki", "ko", "jt", "it"]) \
        .bind("io", twist.Binding.block_y).bind("jo", twist.Binding.block_x) \
        .bind("it", twist.Binding.thread).bind("jt", twist.Binding.thread)
    return s


def gemm_operands(seed: int, rows: int):
    """Random f16 A (rows x 29) and B (29 x 45) and their product in float64."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(rows, 29)).astype(np.float16)
    b = rng.normal(size=(29, 45)).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def test_a_gemm_on_the_oracle_and_on_the_interpreter_matches_numpy():
    a, b, want = gemm_operands(1, 37)
    c = gemm()
    oracle = twist.evaluate(c, {"A": a, "B": b})[0]
    assert np.max(np.abs(oracle - want)) < 1e-9
    program = twist.lower(c, simt_schedule(c), twist.Target.sm80())
    got = twist.interpret(program, {"A": a, "B": b})["C"]
    assert got.shape == (37, 45)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6


def test_blocks_in_reverse_and_in_raster_groups_still_match_numpy():
    a, b, want = gemm_operands(2, 70)
    c = gemm()
    s = simt_schedule(c)
    s[c].reverse("io").raster(2)
    assert "blocks take io last first" in str(s)
    program = twist.lower(c, s, twist.Target.sm80())
    got = twist.interpret(program, {"A": a, "B": b})["C"]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-6
    s[c].reverse("it")
    with pytest.raises(twist.Error, match="reverse\\('it'\\) orders the blocks of a loop bound to a block axis"):
        twist.lower(c, s, twist.Target.sm80())


def test_every_stage_prints():
    c = gemm()
    s = simt_schedule(c)
    assert "C" in c.describe()
    assert "split" in str(s)
    program = twist.lower(c, s, twist.Target.sm80())
    assert program.kernels and "C" in program.loop_nest()
    assert all("__global__" in source for source in program.cuda_sources().values())


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_kernels_compile_to_cubins_without_a_gpu(arch):
    c = gemm()
    program = twist.lower(c, simt_schedule(c), twist.Target.named(arch))
    compiled = twist.compile_kernel(program.kernels[0], arch)
    assert compiled.cubin[:4] == b"\x7fELF"
    assert "__global__" in compiled.source
    assert compiled.registers > 0


def test_an_exported_program_loads_in_the_runtime(tmp_path):
    c = gemm()
    program = twist.lower(c, simt_schedule(c), twist.Target.sm90a())
    path = twist.export_program(program, "py_gemm_64", str(tmp_path), "sm_90a", {"M": 64, "N": 64, "K": 32},
                                {"op": "gemm"})
    manifest = load_manifest(path)
    assert manifest.label == "py_gemm_64" and manifest.notes["op"] == "gemm"
    assert [b.name for b in manifest.with_role("input")] == ["A", "B"]
    assert manifest.buffer("C").shape == (64, 64)
    assert manifest.kernels[0].cubin.read_bytes()[:4] == b"\x7fELF"
    assert json.loads((tmp_path / "py_gemm_64.json").read_text())["kernels"][0]["grid"] == [2, 2, 1]


def test_errors_reach_python_with_the_libraries_message():
    c = gemm()
    s = twist.Schedule()
    s[c].split("nowhere", "a", "b", 4)
    with pytest.raises(twist.Error, match="nowhere"):
        twist.lower(c, s, twist.Target.sm80())
    assert issubclass(twist.Error, RuntimeError)


def test_twist_export_cli_writes_manifests_the_runtime_reads(tmp_path):
    tool = os.environ.get("TWIST")
    if not tool:
        pytest.skip("TWIST (the path of the twist tool) is not set; CTest sets it")
    subprocess.run([tool, "export", "gemm", "--shape", "256x256x64", "--out", str(tmp_path)], check=True,
                   capture_output=True)
    (path,) = tmp_path.glob("*.json")
    manifest = load_manifest(path)
    assert manifest.notes["op"] == "gemm" and manifest.buffer("A").shape == (256, 64)
