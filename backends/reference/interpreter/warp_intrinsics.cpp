// The warp-collective intrinsics: ldmatrix, stmatrix, mma.sync m16n8k16 and shuffle_xor. Each runs for whole
// warps, with the fragment layouts of scheduler/intrinsics.h.
#include <array>

#include "backends/reference/interpreter/intrinsic_statements.h"
#include "lang/error.h"

namespace twist::reference::interpreter {

namespace {

// Calls run_warp(first thread of the warp) for every warp with an active thread, after checking that all
// its lanes are active: warp-collective instructions are undefined on a GPU otherwise.
template <typename RunWarp>
void for_each_warp(Machine &m, const ActiveThreads &active, const char *instruction, RunWarp run_warp) {
  for (size_t k = 0; k < active.size(); k += kWarpSize) {
    const int warp = active[k] / kWarpSize, first = warp * kWarpSize;
    if (first + kWarpSize > m.threads)
      fail(
          "{} needs a whole warp, but warp {} has only {} threads (the block has {}); make the block a "
          "multiple of {} threads",
          instruction, warp, m.threads - first, m.threads, kWarpSize);
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (k + lane >= active.size() || active[k + lane] != first + lane)
        fail(
            "{} by warp {} with lane {} (thread {}) inactive: warp-collective instructions need all {} lanes "
            "of the warp, so keep them out of branches that split a warp",
            instruction, warp, lane, first + lane, kWarpSize);
    }
    run_warp(first);
  }
  m.thread = -1;
}

void require_space(const Array &a, Space space, const char *instruction, const char *operand) {
  if (a.space != space)
    fail("the {} operand of {} is {}, which is not in {} memory", operand, instruction, a.describe(),
         space_name(space));
}

// The first element of a lane's fragment, with every element of it in bounds.
int64_t fragment(Machine &m, const Array &a, const CompiledExpr &index, int thread, int elements,
                 const char *access) {
  m.thread = thread;
  const int64_t first = m.element(a, index(m.slots[thread]), access);
  m.element(a, static_cast<Real>(first + elements - 1), access);
  return first;
}

// The mma.sync m16n8k16 fragment layouts, per lane (g = lane / 4, t = lane % 4), as intrinsics.h gives them.
struct Position {
  int row, col;
};
Position a_position(int lane, int i) {
  const int g = lane / 4, t = lane % 4;
  return {g + 8 * ((i / 2) % 2), 2 * t + i % 2 + 8 * (i / 4)};
}
Position b_position(int lane, int i) {  // (k, n)
  const int g = lane / 4, t = lane % 4;
  return {2 * t + i % 2 + 8 * (i / 2), g};
}
Position c_position(int lane, int i) {
  const int g = lane / 4, t = lane % 4;
  return {g + 8 * (i / 2), 2 * t + i % 2};
}

}  // namespace

// The layout is intrinsic::MatrixMove's: lanes 8j..8j+7 give the rows of matrix j in shared memory, and lane
// l's register elements 2j, 2j+1 are row l/4, columns 2(l%4) and 2(l%4)+1 of matrix j, or with transpose
// rows 2(l%4) and 2(l%4)+1 of column l/4.
Exec compile_matrix_move(StatementCompiler &sc, const intrinsic::MatrixMove &op, Where where) {
  const bool load = op.direction == intrinsic::MatrixMove::Direction::load;
  const char *name = load ? "ldmatrix" : "stmatrix";
  const char *into = load ? "ldmatrix into" : "stmatrix into";
  const char *from = load ? "ldmatrix from" : "stmatrix from";
  Machine *m = &sc.machine();
  Array *dst = &sc.writable_buffer(load ? op.registers : op.shared, into);
  Array *src = &sc.buffer(load ? op.shared : op.registers, from);
  Array *shared = load ? src : dst, *registers = load ? dst : src;
  require_space(*src, load ? Space::shared : Space::registers, name, "source");
  require_space(*dst, load ? Space::registers : Space::shared, name, "destination");
  if (src->type.bits() != 16 || dst->type != src->type)
    fail("{} moves 16-bit elements between buffers of one type; it {} from {} into {}", name,
         load ? "loads" : "stores", src->describe(), dst->describe());
  if (op.matrices != 1 && op.matrices != 2 && op.matrices != 4)
    fail("{} {} 1, 2 or 4 matrices, not {}", name, load ? "loads" : "stores", op.matrices);
  const int matrices = op.matrices;
  const bool transpose = op.transpose;
  const char *shared_access = load ? from : into, *registers_access = load ? into : from;
  CompiledExpr registers_index = sc.expr(op.registers_index), shared_index = sc.expr(op.shared_index);
  return [=](const ActiveThreads &active) {
    m->where = where;
    for_each_warp(*m, active, name, [&](int first) {
      std::array<std::array<int64_t, 8>, 4> rows;
      for (int j = 0; j < matrices; ++j) {
        for (int r = 0; r < 8; ++r) {
          const int64_t row = fragment(*m, *shared, shared_index, first + 8 * j + r, 8, shared_access);
          if (row % 8 != 0)
            fail(
                "{} row {}[{}] (matrix {}, row {}) is not 16-byte aligned: rows must start at a "
                "multiple of 8 elements",
                name, shared->name, row, j, r);
          rows[j][r] = row;
        }
      }
      for (int lane = 0; lane < kWarpSize; ++lane) {
        // fragment() makes the lane the machine's thread: the access is the lane's (ldmatrix's receiving
        // lane, whose register depends on the element; stmatrix's giving lane), for the race checks.
        const int64_t held =
            fragment(*m, *registers, registers_index, first + lane, 2 * matrices, registers_access);
        for (int j = 0; j < matrices; ++j) {
          for (int half = 0; half < 2; ++half) {
            const int across = 2 * (lane % 4) + half, down = lane / 4;
            const int r = transpose ? across : down, c = transpose ? down : across;
            const int64_t in_shared = rows[j][r] + c, in_registers = held + 2 * j + half;
            if (load)
              m->write(*registers, in_registers, m->read(*shared, in_shared));
            else
              m->write(*shared, in_shared, m->read(*registers, in_registers));
          }
        }
      }
    });
  };
}

Exec compile_mma(StatementCompiler &sc, const intrinsic::Mma &op, Where where) {
  Machine *m = &sc.machine();
  Array *d = &sc.writable_buffer(op.d, "mma into");
  Array *a = &sc.buffer(op.a, "mma from");
  Array *b = &sc.buffer(op.b, "mma from");
  Array *c = &sc.buffer(op.c, "mma from");
  require_space(*a, Space::registers, "mma", "A");
  require_space(*b, Space::registers, "mma", "B");
  require_space(*c, Space::registers, "mma", "C");
  require_space(*d, Space::registers, "mma", "D");
  const bool inputs_ok = a->type == b->type && (a->type == f16 || a->type == bf16);
  const auto accumulator_ok = [](const Type &t) { return t == f16 || t == f32; };
  const bool outputs_ok = accumulator_ok(c->type) && accumulator_ok(d->type) &&
                          (a->type != bf16 || (c->type == f32 && d->type == f32));
  if (!inputs_ok || !outputs_ok)
    fail(
        "mma.sync.m16n8k16 multiplies f16 or bf16 A and B (of one type) into f32 or f16 C and D (f32 only "
        "for bf16); this one has A {}, B {}, C {}, D {}",
        a->describe(), b->describe(), c->describe(), d->describe());
  CompiledExpr a_index = sc.expr(op.a_index), b_index = sc.expr(op.b_index), c_index = sc.expr(op.c_index),
               d_index = sc.expr(op.d_index);
  return [=](const ActiveThreads &active) {
    m->where = where;
    for_each_warp(*m, active, "mma", [&](int first) {
      double A[16][16], B[16][8], C[16][8];
      for (int lane = 0; lane < kWarpSize; ++lane) {
        const int t = first + lane;
        const int64_t ai = fragment(*m, *a, a_index, t, 8, "mma read of A from");
        const int64_t bi = fragment(*m, *b, b_index, t, 4, "mma read of B from");
        const int64_t ci = fragment(*m, *c, c_index, t, 4, "mma read of C from");
        for (int i = 0; i < 8; ++i) {
          const Position p = a_position(lane, i);
          A[p.row][p.col] = static_cast<double>(m->read(*a, ai + i));
        }
        for (int i = 0; i < 4; ++i) {
          const Position p = b_position(lane, i);
          B[p.row][p.col] = static_cast<double>(m->read(*b, bi + i));
        }
        for (int i = 0; i < 4; ++i) {
          const Position p = c_position(lane, i);
          C[p.row][p.col] = static_cast<double>(m->read(*c, ci + i));
        }
      }
      // D = A * B + C in double, rounded to D's type once: the products of 16-bit floats are exact in double,
      // and the instruction rounds its result once (up to the order of its additions, which the tensor
      // cores do not specify).
      for (int lane = 0; lane < kWarpSize; ++lane) {
        const int t = first + lane;
        const int64_t di = fragment(*m, *d, d_index, t, 4, "mma write of D into");
        for (int i = 0; i < 4; ++i) {
          const Position p = c_position(lane, i);
          double sum = C[p.row][p.col];
          for (int k = 0; k < 16; ++k) sum += A[p.row][k] * B[k][p.col];
          m->write(*d, di + i, m->compiler.round(d->type, sum));
        }
      }
    });
  };
}

Exec compile_shuffle_xor(StatementCompiler &sc, const intrinsic::ShuffleXor &op, Where where) {
  Machine *m = &sc.machine();
  Array *dst = &sc.writable_buffer(op.dst, "shuffle_xor into");
  require_space(*dst, Space::registers, "shuffle_xor", "destination");
  if (op.value.type() != dst->type)
    fail("shuffle_xor moves a {} value into {}: the types must match", type_name(op.value.type()),
         dst->describe());
  if (op.lane_mask < 0 || op.lane_mask >= kWarpSize)
    fail("shuffle_xor's lane mask {} is not a lane of a {}-lane warp", op.lane_mask, kWarpSize);
  const int lane_mask = op.lane_mask;
  CompiledExpr value = sc.expr(op.value), dst_index = sc.expr(op.dst_index);
  return [=](const ActiveThreads &active) {
    m->where = where;
    for_each_warp(*m, active, "shuffle_xor", [&](int first) {
      std::array<Real, kWarpSize> values;
      for (int lane = 0; lane < kWarpSize; ++lane) {
        m->thread = first + lane;
        values[lane] = value(m->slots[first + lane]);
      }
      for (int lane = 0; lane < kWarpSize; ++lane) {
        const int64_t d = fragment(*m, *dst, dst_index, first + lane, 1, "shuffle_xor into");
        m->write(*dst, d, values[lane ^ lane_mask]);
      }
    });
  };
}

}  // namespace twist::reference::interpreter
