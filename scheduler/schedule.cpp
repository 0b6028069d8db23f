#include "scheduler/schedule.h"

#include <algorithm>

#include "lang/error.h"

namespace twist {

std::string to_string(const Accumulation &a) {
  switch (a.kind) {
    case Accumulation::Kind::f32:
      return "f32";
    case Accumulation::Kind::f16:
      return "f16";
    case Accumulation::Kind::hybrid:
      return fmt::format("hybrid(f16 promoted to f32 every {} k-steps)", a.promote_every);
  }
  return "?";
}

const char *to_string(Binding b) {
  switch (b) {
    case Binding::serial:
      return "serial";
    case Binding::unrolled:
      return "unrolled";
    case Binding::block_x:
      return "block.x";
    case Binding::block_y:
      return "block.y";
    case Binding::block_z:
      return "block.z";
    case Binding::warp:
      return "warp";
    case Binding::thread:
      return "thread";
    case Binding::warpgroup:
      return "warpgroup";
  }
  return "?";
}

const char *to_string(Transport t) {
  switch (t) {
    case Transport::plain:
      return "plain loads";
    case Transport::cp_async:
      return "cp.async";
    case Transport::tma:
      return "TMA";
  }
  return "?";
}

const char *to_string(SharedLayout l) {
  switch (l) {
    case SharedLayout::row_major:
      return "row-major";
    case SharedLayout::padded:
      return "padded";
    case SharedLayout::swizzled:
      return "swizzled";
  }
  return "?";
}

FuncSchedule &FuncSchedule::split(const LoopVar &v, const LoopVar &outer, const LoopVar &inner, int factor) {
  if (factor <= 0)
    fail("schedule of '{}': split({}) needs a positive factor, got {}", func_, v.name(), factor);
  if (outer.name() == inner.name())
    fail("schedule of '{}': split({}) needs two different names for the outer and inner loops", func_,
         v.name());
  transforms_.push_back({SplitDirective{v.name(), outer.name(), inner.name(), factor}, {}, {}});
  return *this;
}

FuncSchedule &FuncSchedule::tile(const LoopVar &i, const LoopVar &j, const LoopVar &io, const LoopVar &jo,
                                 const LoopVar &ii, const LoopVar &ji, int i_factor, int j_factor) {
  split(i, io, ii, i_factor);
  split(j, jo, ji, j_factor);
  return reorder({ji, ii, jo, io});
}

FuncSchedule &FuncSchedule::reorder(const std::vector<LoopVar> &innermost_first) {
  std::vector<std::string> names;
  for (const LoopVar &v : innermost_first) names.push_back(v.name());
  transforms_.push_back({{}, {}, ReorderDirective{names}});
  return *this;
}

FuncSchedule &FuncSchedule::fuse(const LoopVar &inner, const LoopVar &outer, const LoopVar &fused) {
  transforms_.push_back({{}, FuseDirective{inner.name(), outer.name(), fused.name()}, {}});
  return *this;
}

FuncSchedule &FuncSchedule::bind(const LoopVar &v, Binding binding) {
  bindings_[v.name()] = binding;
  return *this;
}

FuncSchedule &FuncSchedule::split_reduction(const LoopVar &r, int parts, SplitCombine combine) {
  if (parts < 2)
    fail("schedule of '{}': split_reduction({}) needs at least 2 parts, got {}", func_, r.name(), parts);
  if (reduction_split_) fail("schedule of '{}': a reduction can be split across blocks once", func_);
  reduction_split_ = ReductionSplit{r.name(), parts, combine};
  return *this;
}

FuncSchedule &FuncSchedule::stage(const Input &input, const LoopVar &at, Transport transport, int depth,
                                  SharedLayout layout) {
  if (depth < 1)
    fail("schedule of '{}': stage({}) needs a pipeline depth of at least 1", func_, input.name());
  if (depth > 1 && transport == Transport::plain)
    fail(
        "schedule of '{}': stage({}) with plain loads cannot be pipelined {} deep; use Transport::cp_async "
        "for a "
        "multi-stage ring",
        func_, input.name(), depth);
  for (const StageDirective &s : stages_)
    if (s.input == input.name()) fail("schedule of '{}': input '{}' is staged twice", func_, input.name());
  stages_.push_back({input.name(), at.name(), transport, depth, layout});
  return *this;
}

FuncSchedule &FuncSchedule::accumulate(Accumulation accumulation) {
  if (accumulation.kind == Accumulation::Kind::hybrid && accumulation.promote_every < 1)
    fail("schedule of '{}': hybrid accumulation needs promote_every >= 1", func_);
  accumulation_ = accumulation;
  return *this;
}

FuncSchedule &FuncSchedule::matrix_atom(MatrixAtom atom, const LoopVar &i, const LoopVar &j,
                                        const LoopVar &k) {
  atom_ = AtomDirective{atom, i.name(), j.name(), k.name()};
  return *this;
}

FuncSchedule &FuncSchedule::raster(int group) {
  if (group < 1) fail("schedule of '{}': raster() needs a group of at least 1", func_);
  raster_group_ = group;
  return *this;
}

FuncSchedule &FuncSchedule::reverse(const LoopVar &v) {
  if (std::find(reversed_.begin(), reversed_.end(), v.name()) == reversed_.end())
    reversed_.push_back(v.name());
  return *this;
}

FuncSchedule &FuncSchedule::warp_specialize(WarpSpecialization registers) {
  for (const auto &[role, count] : {std::pair{"producer", registers.producer_registers},
                                    std::pair{"consumer", registers.consumer_registers}})
    if (count < 24 || count > 256 || count % 8 != 0)
      fail(
          "schedule of '{}': warp_specialize() gives the {} warpgroup {} registers per thread, but "
          "setmaxnreg "
          "takes 24 to 256 in steps of 8",
          func_, role, count);
  if (registers.producer_registers > registers.consumer_registers)
    fail(
        "schedule of '{}': warp_specialize() gives the producer {} registers per thread and the consumers "
        "{}; "
        "the producer only issues copies, so it gives registers to the consumers, not the other way",
        func_, registers.producer_registers, registers.consumer_registers);
  warp_specialization_ = registers;
  return *this;
}

FuncSchedule &FuncSchedule::persistent(int blocks) {
  if (blocks < 1) fail("schedule of '{}': persistent() needs at least one block, not {}", func_, blocks);
  persistent_blocks_ = blocks;
  return *this;
}

FuncSchedule &FuncSchedule::stream_k(bool on, StreamKTiles tiles) {
  stream_k_ = on;
  stream_k_tiles_ = tiles;
  return *this;
}

FuncSchedule &FuncSchedule::cluster(int blocks) {
  if (blocks < 1 || blocks > 2)
    fail(
        "schedule of '{}': cluster({}): clusters of 1 or 2 blocks are lowered (a pair of tiles sharing one "
        "operand); use cluster(2) or cluster(1)",
        func_, blocks);
  cluster_blocks_ = blocks;
  return *this;
}

FuncSchedule &FuncSchedule::store_output(Transport transport, bool stmatrix) {
  if (transport == Transport::cp_async)
    fail(
        "schedule of '{}': store_output(Transport::cp_async): cp.async copies into shared memory, not out of "
        "it; use Transport::plain (threads store whole rows) or Transport::tma (a TMA store)",
        func_);
  output_transport_ = transport;
  stmatrix_writes_ = stmatrix;
  return *this;
}

FuncSchedule &FuncSchedule::store_output_sub_tiles(int buffers) {
  if (buffers < 0 || buffers == 1)
    fail(
        "schedule of '{}': store_output_sub_tiles({}): the output's boxes go out through 2 or more shared "
        "buffers used in turn (one would leave each box's writes waiting for the previous box's store), or "
        "0 for the whole tile at once",
        func_, buffers);
  output_sub_tile_buffers_ = buffers;
  return *this;
}

FuncSchedule &FuncSchedule::compute_at(const Func &consumer, const LoopVar &at) {
  if (compute_root_)
    fail("schedule of '{}': compute_at() after compute_root(); choose one place for it", func_);
  compute_at_ = ComputeAt{consumer.name(), at.name()};
  return *this;
}

FuncSchedule &FuncSchedule::compute_root() {
  if (compute_at_)
    fail("schedule of '{}': compute_root() after compute_at(); choose one place for it", func_);
  compute_root_ = true;
  return *this;
}

FuncSchedule &FuncSchedule::assume_associative(const std::string &reason) {
  if (reason.empty()) fail("schedule of '{}': assume_associative() needs a reason, which is recorded", func_);
  override_ = reason;
  return *this;
}

FuncSchedule &FuncSchedule::min_blocks_per_sm(int blocks) {
  if (blocks < 1) fail("schedule of '{}': min_blocks_per_sm() needs at least 1", func_);
  min_blocks_ = blocks;
  return *this;
}

FuncSchedule &FuncSchedule::approximate_math(bool on) {
  approximate_ = on;
  return *this;
}

FuncSchedule &FuncSchedule::row_form(RowForm form, int threads_per_row) {
  if (threads_per_row != 0 &&
      (threads_per_row < 32 || threads_per_row > 1024 || (threads_per_row & (threads_per_row - 1)) != 0))
    fail("schedule of '{}': row_form() takes a power of two from 32 to 1024 threads per row, not {}", func_,
         threads_per_row);
  row_form_ = form;
  row_threads_ = threads_per_row;
  return *this;
}

FuncSchedule &FuncSchedule::overlap_producer(bool on) {
  overlap_producer_ = on;
  return *this;
}

FuncSchedule &FuncSchedule::delay_column_products(bool on) {
  delay_column_products_ = on;
  return *this;
}

std::string FuncSchedule::to_string() const {
  std::string s = fmt::format("schedule of {}:\n", func_);
  for (const Transform &t : transforms_) {
    if (t.split)
      s += fmt::format("  split {} -> {}, {} by {}\n", t.split->var, t.split->outer, t.split->inner,
                       t.split->factor);
    if (t.fuse) s += fmt::format("  fuse {}, {} -> {}\n", t.fuse->inner, t.fuse->outer, t.fuse->fused);
    if (t.reorder) {
      std::string names;
      for (const std::string &n : t.reorder->innermost_first) names += (names.empty() ? "" : ", ") + n;
      s += fmt::format("  reorder (innermost first) {}\n", names);
    }
  }
  for (const auto &[var, b] : bindings_) s += fmt::format("  bind {} to {}\n", var, twist::to_string(b));
  for (const StageDirective &st : stages_)
    s += fmt::format("  stage {} in shared memory at {}: {}, {} stage(s), {}\n", st.input, st.at,
                     twist::to_string(st.transport), st.depth, twist::to_string(st.layout));
  if (atom_)
    s += fmt::format("  matrix atom {} over ({}, {}, {})\n",
                     atom_->atom == MatrixAtom::wgmma ? "wgmma.m64nNk16" : "mma.m16n8k16", atom_->i, atom_->j,
                     atom_->k);
  s += fmt::format("  accumulate in {}\n", twist::to_string(accumulation_));
  if (reduction_split_)
    s += fmt::format("  split reduction {} into {} parts, combined by {}\n", reduction_split_->var,
                     reduction_split_->parts,
                     reduction_split_->combine == SplitCombine::kernel       ? "a combine kernel"
                     : reduction_split_->combine == SplitCombine::last_block ? "each tile's last block"
                                                                             : "atomics");
  if (raster_group_ > 1) s += fmt::format("  raster in groups of {}\n", raster_group_);
  for (const std::string &v : reversed_) s += fmt::format("  blocks take {} last first\n", v);
  if (persistent_blocks_ > 0)
    s += fmt::format("  persistent grid of at most {} blocks\n", persistent_blocks_);
  if (cluster_blocks_ > 1) s += fmt::format("  clusters of {} blocks with TMA multicast\n", cluster_blocks_);
  if (stream_k_)
    s += fmt::format(
        "  stream-K: {} split along k across the persistent blocks\n",
        stream_k_tiles_ == StreamKTiles::tail ? "the partial wave's tiles" : "the last two waves' tiles");
  if (output_transport_ != Transport::plain)
    s += fmt::format("  output tiles stored by {}{}{}\n", twist::to_string(output_transport_),
                     stmatrix_writes_ ? ", written by stmatrix" : "",
                     output_sub_tile_buffers_
                         ? fmt::format(", one box at a time through {} buffers", output_sub_tile_buffers_)
                         : "");
  if (warp_specialization_)
    s += fmt::format("  warp specialized: a producer warpgroup at {} registers, consumers at {}{}\n",
                     warp_specialization_->producer_registers, warp_specialization_->consumer_registers,
                     warp_specialization_->ping_pong ? " in ping-pong" : "");
  if (compute_at_) s += fmt::format("  compute at {} loop {}\n", compute_at_->consumer, compute_at_->at);
  if (compute_root_) s += "  compute root (a stage of its own)\n";
  if (override_) s += fmt::format("  associativity assumed by the user: {}\n", *override_);
  if (approximate_) s += "  approximate exp and exp2\n";
  if (row_form_ == RowForm::registers) s += "  rows kept in registers\n";
  if (row_form_ == RowForm::reread) s += "  rows read again from global memory by each pass\n";
  if (row_threads_) s += fmt::format("  {} threads per row\n", row_threads_);
  if (overlap_producer_) s += "  overlap the next key tile's producer contraction with this tile's update\n";
  if (delay_column_products_) s += "  column products issued with the next key tile's producer contraction\n";
  return s;
}

FuncSchedule FuncSchedule::without_reorders() const {
  FuncSchedule copy = *this;
  std::erase_if(copy.transforms_, [](const Transform &t) { return t.reorder.has_value(); });
  return copy;
}

FuncSchedule &Schedule::operator[](const Func &f) {
  auto it = funcs_.find(f.name());
  if (it == funcs_.end()) it = funcs_.emplace(f.name(), FuncSchedule(f.name())).first;
  return it->second;
}

FuncSchedule &Schedule::set_like(const Func &f, const FuncSchedule &like) {
  funcs_.insert_or_assign(f.name(), FuncSchedule(f.name(), like));
  return funcs_.at(f.name());
}

const FuncSchedule *Schedule::find(const std::string &func) const {
  auto it = funcs_.find(func);
  return it == funcs_.end() ? nullptr : &it->second;
}

std::string Schedule::to_string() const {
  std::string s;
  for (const auto &[name, fs] : funcs_) s += fs.to_string();
  return s;
}

FuncSchedule &tile_for_mma(FuncSchedule &s, const LoopVar &i, const LoopVar &j, const LoopVar &k, int block_m,
                           int block_n, int block_k, int warp_m, int warp_n) {
  return s.tile(i, j, "io", "jo", "ii", "ji", block_m, block_n)
      .split("ii", "iw", "im", warp_m)
      .split("ji", "jw", "jn", warp_n)
      .split("im", "imt", "ia", 16)
      .split("jn", "jnt", "ja", 8)
      .split(k, "ko", "kk", block_k)
      .split("kk", "kt", "ka", 16)
      .reorder({"ka", "ja", "ia", "jnt", "imt", "kt", "ko", "jw", "iw"})
      .bind("io", Binding::block_y)
      .bind("jo", Binding::block_x)
      .bind("iw", Binding::warp)
      .bind("jw", Binding::warp)
      .unroll("imt")
      .unroll("jnt")
      .unroll("kt")
      .matrix_atom(MatrixAtom::mma_m16n8k16, "ia", "ja", "ka");
}

}  // namespace twist
