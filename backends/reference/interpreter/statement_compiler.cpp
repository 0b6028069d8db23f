#include "backends/reference/interpreter/statement_compiler.h"

#include <sstream>

#include "backends/reference/interpreter/intrinsic_statements.h"
#include "lang/error.h"
#include "scheduler/hopper_layouts.h"

namespace twist::reference::interpreter {

using namespace Halide::Internal;

namespace {

template <typename T>
std::string show(const T &node) {
  std::ostringstream os;
  os << node;
  std::string s = os.str();
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// The first line of a statement, for messages about statements that contain others.
std::string first_line(const Stmt &s) {
  const std::string text = show(s);
  return text.substr(0, text.find('\n'));
}

const char *for_type_name(ForType t) {
  switch (t) {
    case ForType::Serial:
      return "serial";
    case ForType::Parallel:
      return "parallel";
    case ForType::Vectorized:
      return "vectorized";
    case ForType::Unrolled:
      return "unrolled";
    case ForType::Extern:
      return "extern";
    case ForType::GPUBlock:
      return "GPU block";
    case ForType::GPUThread:
      return "GPU thread";
    case ForType::GPULane:
      return "GPU lane";
  }
  return "unknown";
}

// Whether `s` holds a statement that waits for other threads: an mbarrier wait or a barrier.
bool may_block(const Stmt &s) {
  struct Finds : IRVisitor {
    bool found = false;
    using IRVisitor::visit;
    void visit(const Evaluate *op) override {
      const Stmt stmt = Evaluate::make(op->value);
      const std::optional<intrinsic::MbarrierOp> mbarrier = intrinsic::as_mbarrier(stmt);
      const std::optional<intrinsic::NamedBarrier> named = intrinsic::as_named_barrier(stmt);
      found = found || intrinsic::is_barrier(stmt) || (named && !named->arrive) ||
              intrinsic::is_cluster_sync(stmt) ||
              (mbarrier && mbarrier->kind == intrinsic::MbarrierOp::Kind::wait);
    }
  } finds;
  s.accept(&finds);
  return finds.found;
}

std::optional<int64_t> constant(const Halide::Expr &e) {
  const Halide::Expr simplified = simplify(e);
  if (const int64_t *value = as_const_int(simplified)) return *value;
  return std::nullopt;
}

}  // namespace

StatementCompiler::StatementCompiler(Machine &machine) : machine_(machine) {
  machine_.compiler.on_load([this](const Load *op) -> ExprCompiler::LoadFn {
    Array &a = buffer(op->name, "load from");
    if (op->type != a.type)
      fail("`{}` loads {} from {}: a load must have the buffer's element type", show(Halide::Expr(op)),
           type_name(op->type), a.describe());
    Machine *m = &machine_;
    Array *array = &a;
    return [m, array](Real index) { return m->read(*array, m->element(*array, index, "load from")); };
  });
}

// The resolver captures this compiler, which does not outlive the compilation.
StatementCompiler::~StatementCompiler() {
  machine_.compiler.on_load(nullptr);
}

void StatementCompiler::add_buffer(Array &array) {
  buffers_[array.name].push_back(&array);
}

void StatementCompiler::add_variable(const std::string &name) {
  ++bound_[name];
  machine_.compiler.slot(name);
}

CompiledExpr StatementCompiler::expr(const Halide::Expr &e) {
  return machine_.compiler.compile(e);
}

Array &StatementCompiler::buffer(const std::string &name, const char *use) {
  auto it = buffers_.find(name);
  if (it == buffers_.end() || it->second.empty())
    fail("the {} '{}' names no buffer: it is neither one of the kernel's buffers nor an enclosing Allocate",
         use, name);
  return *it->second.back();
}

Array &StatementCompiler::writable_buffer(const std::string &name, const char *use) {
  Array &a = buffer(name, use);
  if (!a.writable)
    fail(
        "the {} {} writes one of the kernel's input buffers, which are read-only; write an output or a "
        "workspace",
        use, a.describe());
  return a;
}

std::string StatementCompiler::bind(const std::string &name, const Type &type, Stmt &body) {
  std::string bound = name;
  if (bound_[name] > 0) {
    bound = fmt::format("{}#{}", name, ++renames_);
    body = substitute(name, Variable::make(type, bound), body);
  }
  ++bound_[bound];
  return bound;
}

void StatementCompiler::unbind(const std::string &bound) {
  --bound_[bound];
}

Exec StatementCompiler::compile(const Stmt &s) {
  switch (s->node_type) {
    case IRNodeType::Block:
      return block(s);
    case IRNodeType::LetStmt:
      return let_stmt(s.as<LetStmt>());
    case IRNodeType::For:
      return for_loop(s.as<For>());
    case IRNodeType::IfThenElse:
      return if_then_else(s.as<IfThenElse>());
    case IRNodeType::Allocate:
      return allocate(s.as<Allocate>());
    case IRNodeType::Store:
      return store(s.as<Store>());
    case IRNodeType::Evaluate:
      return evaluate(s);
    case IRNodeType::AssertStmt:
      return assert_stmt(s.as<AssertStmt>());
    default:
      machine_.where = machine_.describe(first_line(s));
      fail(
          "the interpreter does not run this kind of statement: the loop-nest IR (scheduler/loop_nest.h) is "
          "made of Block, LetStmt, For, IfThenElse, Allocate, Store, AssertStmt and the twist intrinsics");
  }
}

Exec StatementCompiler::block(const Stmt &s) {
  // A chain of Blocks is flattened, so that long bodies do not nest closures deeply.
  std::vector<Exec> parts;
  Stmt rest = s;
  while (const auto *b = rest.as<Block>()) {
    parts.push_back(compile(b->first));
    rest = b->rest;
  }
  parts.push_back(compile(rest));
  return [parts = std::move(parts)](const ActiveThreads &active) {
    for (const Exec &part : parts) part(active);
  };
}

Exec StatementCompiler::let_stmt(const LetStmt *op) {
  Machine *m = &machine_;
  const Where where = m->describe(fmt::format("let {} = {}", op->name, show(op->value)));
  m->where = where;
  CompiledExpr value = expr(op->value);
  Stmt body = op->body;
  const std::string name = bind(op->name, op->value.type(), body);
  const int slot = m->compiler.slot(name);
  Exec run_body = compile(body);
  unbind(name);
  return [=](const ActiveThreads &active) {
    m->where = where;
    for (int t : active) {
      m->thread = t;
      m->slots[t][slot] = value(m->slots[t]);
    }
    m->thread = -1;
    run_body(active);
  };
}

Exec StatementCompiler::for_loop(const For *op) {
  Machine *m = &machine_;
  const Where where = m->describe(fmt::format("for ({}, {}, {})", op->name, show(op->min), show(op->extent)));
  m->where = where;
  if (op->for_type != ForType::Serial && op->for_type != ForType::Unrolled)
    fail(
        "the loop is {}; the loop-nest IR has only serial and unrolled loops (parallelism is in the block "
        "and "
        "thread indices)",
        for_type_name(op->for_type));
  if (op->for_type == ForType::Unrolled && !constant(op->extent))
    fail(
        "the loop is unrolled but its extent `{}` is not a constant; unrolled loops are fully unrolled, so "
        "their extent must be known when the kernel is compiled",
        show(op->extent));
  CompiledExpr min = expr(op->min), extent = expr(op->extent);
  Stmt body = op->body;
  const std::string name = bind(op->name, op->min.type(), body);
  const int slot = m->compiler.slot(name);
  Exec run_body = compile(body);
  unbind(name);
  return [=](const ActiveThreads &active) {
    m->where = where;
    m->thread = active.front();
    const Real lo = min(m->slots[m->thread]), n = extent(m->slots[m->thread]);
    for (int t : active) {
      m->thread = t;
      const Real lo_t = min(m->slots[t]), n_t = extent(m->slots[t]);
      if (lo_t != lo || n_t != n)
        fail(
            "divergent loop bounds are not supported: thread {} runs the loop from {} for {} iterations, "
            "thread {} from {} for {}; the interpreter needs bounds that are the same for every active "
            "thread, so guard the thread-dependent part inside the loop instead",
            active.front(), static_cast<double>(lo), static_cast<double>(n), t, static_cast<double>(lo_t),
            static_cast<double>(n_t));
    }
    m->thread = -1;
    for (Real i = lo; i < lo + n; ++i) {
      for (int t : active) m->slots[t][slot] = i;
      run_body(active);
    }
  };
}

Exec StatementCompiler::if_then_else(const IfThenElse *op) {
  Machine *m = &machine_;
  const Where where = m->describe(fmt::format("if ({})", show(op->condition)));
  m->where = where;
  CompiledExpr condition = expr(op->condition);
  Exec then_case = compile(op->then_case);
  Exec else_case = op->else_case.defined() ? compile(op->else_case) : Exec();
  // Branches that may block (wait on an mbarrier or at a barrier) are roles that run side by side, such as
  // a warp-specialized kernel's producer and consumers: run one after the other, each could wait for the
  // other forever.
  const bool roles = else_case && (may_block(op->then_case) || may_block(op->else_case));
  return [=](const ActiveThreads &active) {
    m->where = where;
    ActiveThreads taken, not_taken;
    for (int t : active) {
      m->thread = t;
      (condition(m->slots[t]) != 0 ? taken : not_taken).push_back(t);
    }
    m->thread = -1;
    if (roles && !taken.empty() && !not_taken.empty()) {
      // Each warpgroup of each role is a group of its own: a GPU runs them independently, and warpgroups
      // of one role may wait for each other (the named barriers of ping-pong consumers).
      std::vector<ActiveThreads> parts;
      std::vector<std::function<void()>> runs;
      auto split = [&](const ActiveThreads &threads) {
        parts.emplace_back();
        for (int t : threads) {
          if (!parts.back().empty() &&
              parts.back().front() / hopper::kWarpgroupThreads != t / hopper::kWarpgroupThreads)
            parts.emplace_back();
          parts.back().push_back(t);
        }
      };
      split(taken);
      const size_t then_parts = parts.size();
      split(not_taken);
      for (size_t k = 0; k < parts.size(); ++k)
        runs.push_back([&, k] { (k < then_parts ? then_case : else_case)(parts[k]); });
      m->groups.run_concurrently(runs);
      return;
    }
    // Other divergent branches run one after the other, each with its part of the mask, as a warp does.
    if (!taken.empty()) then_case(taken);
    if (else_case && !not_taken.empty()) else_case(not_taken);
  };
}

Exec StatementCompiler::allocate(const Allocate *op) {
  Machine *m = &machine_;
  std::string extents;
  for (const Halide::Expr &e : op->extents) extents += (extents.empty() ? "" : " * ") + show(e);
  const Where where = m->describe(
      fmt::format("allocate {}[{} * {}] in {}", op->name, type_name(op->type), extents,
                  op->memory_type == Halide::MemoryType::GPUShared ? "shared memory" : "registers"));
  m->where = where;
  Space space;
  if (op->memory_type == Halide::MemoryType::GPUShared)
    space = Space::shared;
  else if (op->memory_type == Halide::MemoryType::Register)
    space = Space::registers;
  else
    fail(
        "the allocation is neither in shared memory nor in registers; the loop-nest IR allocates only those "
        "(Halide::MemoryType::GPUShared and Halide::MemoryType::Register)");
  if (!is_const_one(op->condition) || op->new_expr.defined())
    fail(
        "the allocation is conditional or has a custom allocator; the loop-nest IR allocates "
        "unconditionally");
  int64_t size = 1;
  for (const Halide::Expr &e : op->extents) {
    const std::optional<int64_t> extent = constant(e);
    if (!extent || *extent < 0)
      fail(
          "the extent `{}` is not a non-negative constant; shared and register arrays have sizes known when "
          "the kernel is compiled",
          show(e));
    size *= *extent;
  }
  Array &array = m->add_array(Array(op->name, op->type, space, size));
  if (space == Space::shared) {
    const std::vector<SharedArray> &placed = m->shared_layout.arrays;
    const size_t k = shared_arrays_compiled_++;
    TWIST_CHECK(k < placed.size() && placed[k].allocate->name == op->name,
                "shared array {} is not where shared_arrays placed the kernel's arrays", op->name);
    array.base_address = placed[k].offset;
    m->shared_by_name[op->name] = &array;
  }
  poison(op->type);  // refuses element types that arrays cannot hold, now rather than at run time
  buffers_[op->name].push_back(&array);
  Exec body = compile(op->body);
  buffers_[op->name].pop_back();
  Array *a = &array;
  return [=](const ActiveThreads &active) {
    reset(*a, m->threads, m->options.check_races);
    body(active);
  };
}

Exec StatementCompiler::store(const Store *op) {
  Machine *m = &machine_;
  const Where where = m->describe(fmt::format("{}[{}] = {}", op->name, show(op->index), show(op->value)));
  m->where = where;
  if (!is_const_one(op->predicate))
    fail("the store is predicated; the loop-nest IR guards stores with IfThenElse instead");
  Array *a = &writable_buffer(op->name, "store to");
  if (op->value.type() != a->type)
    fail("the store writes a {} value into {}: the types must match, so cast the value to {}",
         type_name(op->value.type()), a->describe(), type_name(a->type));
  CompiledExpr index = expr(op->index), value = expr(op->value);
  struct Pending {
    Real index, value;
  };
  std::vector<Pending> pending;
  return [=](const ActiveThreads &active) mutable {
    m->where = where;
    pending.resize(active.size());
    for (size_t k = 0; k < active.size(); ++k) {
      const int t = m->thread = active[k];
      pending[k] = {index(m->slots[t]), value(m->slots[t])};
    }
    for (size_t k = 0; k < active.size(); ++k) {
      m->thread = active[k];
      m->write(*a, m->element(*a, pending[k].index, "store to"),
               m->compiler.round(a->type, pending[k].value));
    }
    m->thread = -1;
  };
}

Exec StatementCompiler::evaluate(const Stmt &s) {
  Machine *m = &machine_;
  const Where where = m->describe(show(s.as<Evaluate>()->value));
  m->where = where;
  if (intrinsic::is_barrier(s)) return compile_block_barrier(*this, where);
  if (auto b = intrinsic::as_named_barrier(s)) return compile_named_barrier(*this, *b, where);
  if (auto op = intrinsic::as_copy(s)) return compile_copy(*this, *op, where);
  if (intrinsic::is_async_commit(s)) return compile_async_commit(*this, where);
  if (auto pending = intrinsic::as_async_wait(s)) return compile_async_wait(*this, *pending, where);
  if (auto op = intrinsic::as_matrix_move(s)) return compile_matrix_move(*this, *op, where);
  if (auto op = intrinsic::as_mma(s)) return compile_mma(*this, *op, where);
  if (auto op = intrinsic::as_shuffle_xor(s)) return compile_shuffle_xor(*this, *op, where);
  if (auto op = intrinsic::as_atomic_add(s)) return compile_atomic_add(*this, *op, where);
  if (intrinsic::is_threadfence(s)) return compile_threadfence(*this, where);
  if (auto op = intrinsic::as_arrival_ticket(s)) return compile_arrival_ticket(*this, *op, where);
  if (auto op = intrinsic::as_mbarrier(s)) return compile_mbarrier(*this, *op, where);
  if (auto op = intrinsic::as_tma_copy(s)) return compile_tma_copy(*this, *op, where);
  if (intrinsic::is_tma_store_commit(s)) return compile_held_commit(*this, HeldKind::bulk_store, where);
  if (auto pending = intrinsic::as_tma_store_wait(s))
    return compile_held_wait(*this, HeldKind::bulk_store, *pending, where);
  if (intrinsic::is_fence_proxy_async(s)) {
    Machine *m = &machine_;
    return [m](const ActiveThreads &active) {
      for (int t : active) ++m->proxy_fences[t];
    };
  }
  if (intrinsic::is_cluster_sync(s)) return compile_cluster_sync(*this, where);
  // The interpreter's mbarrier_init is visible to the cluster at once; cluster_sync orders it before the
  // peers' uses.
  if (intrinsic::is_fence_mbarrier_init(s)) return [](const ActiveThreads &) {};
  if (auto op = intrinsic::as_wgmma(s)) return compile_wgmma(*this, *op, where);
  if (intrinsic::is_wgmma_fence(s)) return compile_warpgroup_sync(*this, "wgmma.fence", where);
  if (intrinsic::as_setmaxnreg(s)) return compile_warpgroup_sync(*this, "setmaxnreg", where);
  if (intrinsic::is_wgmma_commit(s)) return compile_held_commit(*this, HeldKind::wgmma, where);
  if (auto pending = intrinsic::as_wgmma_wait(s))
    return compile_held_wait(*this, HeldKind::wgmma, *pending, where);
  if (intrinsic::is_intrinsic(s))
    fail("this twist intrinsic is unknown to the interpreter; scheduler/intrinsics.h lists the ones it runs");
  // Halide's no-op statement.
  if (is_const(s.as<Evaluate>()->value)) return [](const ActiveThreads &) {};
  fail("an Evaluate in the loop-nest IR is a twist intrinsic; this one evaluates an expression for nothing");
}

Exec StatementCompiler::assert_stmt(const AssertStmt *op) {
  Machine *m = &machine_;
  const Where where = m->describe(fmt::format("assert({}, {})", show(op->condition), show(op->message)));
  m->where = where;
  CompiledExpr condition = expr(op->condition);
  // Halide's assertion messages are i32 calls (halide_error and friends); their string arguments say what
  // went wrong, and the call itself is shown when it has none.
  std::string message;
  if (const auto *call = op->message.as<Call>())
    for (const Halide::Expr &arg : call->args)
      if (const auto *text = arg.as<StringImm>()) message += (message.empty() ? "" : " ") + text->value;
  if (message.empty()) message = show(op->message);
  return [=](const ActiveThreads &active) {
    m->where = where;
    for (int t : active) {
      m->thread = t;
      if (condition(m->slots[t]) == 0) fail("assertion failed: {}", message);
    }
    m->thread = -1;
  };
}

}  // namespace twist::reference::interpreter
