// SPDX-License-Identifier: MIT
// The calibration pass (see calibrate.hpp).
#include "quantizer/calibrate.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "quantizer/dynamic_dims.hpp"
#include "quantizer/fp16_model.hpp"
#include "quantizer/numerics.hpp"
#include "quantizer/range_file.hpp"
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include <quark/calib/distribution_calibrator.hpp>
#include <quark/calib/mse_calibrator.hpp>
#include <quark/calib/tensor_calibrator.hpp>
#include <quark/calib/to_qparams.hpp>
#include <quark/observer/json.hpp>
#include <quark/onnx/runtime.hpp>

namespace quark::onnx::qz {

namespace {

runtime make_runtime(const std::string& bytes, const std::filesystem::path& base_dir) {
  return runtime::from_bytes(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()),
      base_dir);
}

/// The error of an observer of value `name`. The calibration inputs were checked finite, so an
/// activation holding +-Inf means the float model itself overflows on them: the message says so.
frontend_error calibration_error(const std::string& name, const quark::error& e) {
  std::string m = "calibrating tensor '" + name + "': " + e.message();
  if (e.id() == "quark.calib.infinite_input")
    m += " (the float model computes +-Inf here from finite calibration inputs: a weight or an "
         "input far outside the range the model expects)";
  return frontend_error(e.id(), m);
}

/// Element type of a graph input description (the runtime's or the model's value_info).
template <class V>
dtype_id type_of(const V& v) {
  if constexpr (requires { v.type; }) {
    return v.type;
  } else {
    const auto t = dtype_from_onnx(v.elem_type);
    return t ? *t : dtype_id::undefined;
  }
}

std::vector<input_signature> signatures(const runtime& rt) {
  std::vector<input_signature> out;
  for (const auto& in : rt.inputs())
    out.push_back({in.name, type_of(in), in.shape});
  return out;
}

/// The full integer grid of an activation type (the calibrators take the symmetric table
/// from it where Quark does).
int_grid grid_of_type(dtype_id t) {
  switch (t) {
    case dtype_id::uint8:
      return grid_of<std::uint8_t>(range_table::full);
    case dtype_id::int16:
      return grid_of<std::int16_t>(range_table::full);
    case dtype_id::uint16:
      return grid_of<std::uint16_t>(range_table::full);
    default:
      return grid_of<std::int8_t>(range_table::full);
  }
}

quark::calib_method to_calib_method(act_method m) {
  switch (m) {
    case act_method::minmax:
      return quark::calib_method::minmax;
    case act_method::pof2_minmax:
      return quark::calib_method::pof2_non_overflow;
    case act_method::percentile:
      return quark::calib_method::percentile;
    case act_method::pof2_minmse:
      return quark::calib_method::pof2_minmse;
    case act_method::float_minmse:
      return quark::calib_method::float_minmse;
    case act_method::entropy:
      return quark::calib_method::entropy;
    case act_method::layerwise_percentile:
      return quark::calib_method::layerwise_percentile;
    case act_method::distribution:
      return quark::calib_method::distribution;
    case act_method::none:
      break;
  }
  return quark::calib_method::minmax;
}

/// A value an element-wise node makes from another one and a scalar constant, as a float map
/// y = f(x): one float operation per node, in the nodes' order (calib_params::derive). Each
/// step is monotone on floats, so the chain is.
struct float_chain {
  enum class op : std::uint8_t { mul, add, sub, rsub, div };
  struct step {
    op o;
    float c;
  };
  std::vector<step> steps;
  float operator()(float v) const noexcept {
    for (const step& s : steps) {
      switch (s.o) {
        case op::mul:
          v = v * s.c;
          break;
        case op::add:
          v = v + s.c;
          break;
        case op::sub:
          v = v - s.c;
          break;
        case op::rsub:
          v = s.c - v;
          break;
        case op::div:
          v = v / s.c;
          break;
      }
    }
    return v;
  }
};

struct slot;

/// What for_each_sample does with a value (calib_params::derive).
enum class derive_route : std::uint8_t {
  observe,      ///< as usual
  derived,      ///< nothing: its batch was derived from its root's
  behind_root,  ///< queued behind its root, which still waits in the background queue
};

/// calib_params::derive: what links a derived value to its root (the observed value its chain
/// starts from), and a root to its derived values. Guarded by calibrate's derive mutex.
struct derive_state {
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  // A derived value:
  slot* root = nullptr;
  float_chain f;
  histogram_map map;
  std::size_t claimed = none;  ///< the sample whose batch is taken: derived, or observed as usual
  bool derived = false;        ///< whether that batch was derived
  // A root:
  std::vector<slot*> dependents;
  std::size_t done = none;  ///< the last sample whose batch it completed
  std::size_t last_size = 0;
};

/// The observers of one tensor. Methods whose first pass is one histogram (Percentile, Entropy,
/// LayerwisePercentile, pof2 MinMSE "All" with bins) keep the histogram_observer here and give
/// its statistic to the header calibrator of the method, so a large value can be binned on
/// several threads with exactly the counts of one sequential observe() (see observe_parallel);
/// every other method is a quark::tensor_calibrator.
struct slot {
  std::string name;
  calib_options opt;
  dtype_id type = dtype_id::int8;  ///< the quantized type (a float8 one: MinMSE's own search)
  std::optional<tensor_calibrator> cal;
  std::optional<histogram_observer> hist;
  std::vector<calibrated_range> cands;  ///< LayerwisePercentile candidates (second pass)
  std::optional<lwp_scorer> scorer;
  std::uint64_t seen = 0;   ///< elements observed in the first pass
  std::size_t batches = 0;  ///< batches observed in pieces (observe_parallel)
  bool dropped = false;     ///< calib_params::after_first_sample: no longer needed
  bool redo = false;        ///< lumped Percentile undecided: observed again unlumped (pass 2)
  bool queued = false;      ///< a value of it waits in (or is run by) the background_observer
  /// calib_params::fuse: the batch being binned chunk by chunk inside the producing kernel.
  /// Shared so the slot stays movable; the sink refers to the slot's histogram.
  struct streamed {
    std::optional<histogram_pieces> pieces;  ///< set while a node streams its output here
    std::atomic<std::size_t> values{0};      ///< elements the sink received
    bool counted_extrema_first = false;      ///< for growth_counts, as observe_parallel
    chunk_sink sink;
  };
  std::shared_ptr<streamed> stream;
  /// calib_params::derive: set on a derived value and on a root (shared: the slot stays movable).
  std::shared_ptr<derive_state> derive;

  [[nodiscard]] bool minmax_family() const noexcept {
    return (opt.method == quark::calib_method::minmax ||
            opt.method == quark::calib_method::pof2_non_overflow) &&
           opt.average == moving_average::off;
  }
  [[nodiscard]] bool needs_second_pass() const noexcept {
    return opt.method == quark::calib_method::layerwise_percentile ||
           (cal && cal->needs_second_pass());
  }
  /// A lumped Percentile histogram whose percentile lies below its exact bins
  /// (calib_params::lump).
  [[nodiscard]] bool lump_undecided() const noexcept {
    return opt.method == quark::calib_method::percentile && hist &&
           !percentile_decided(hist->stats(), opt.percentile);
  }
  /// The symmetric table of the grid (signed >= 8 bits: -qmax..qmax), as tensor_calibrator.
  [[nodiscard]] int_grid pof2_grid() const noexcept {
    const int_grid g = opt.grid;
    return g.qmin == -g.qmax - 1 && g.qmax >= 127 ? int_grid{-g.qmax, g.qmax} : g;
  }
  [[nodiscard]] range_symmetry symmetry() const noexcept {
    return opt.symmetry.value_or(default_range_symmetry(opt.method));
  }
};

slot make_slot(const std::string& name, const calib_request& r, const calib_params& p, bool lump) {
  slot s;
  s.name = name;
  s.type = r.type;
  calib_options& o = s.opt;
  o.method = to_calib_method(r.method);
  o.symmetry = r.symmetric_range ? range_symmetry::symmetric : range_symmetry::asymmetric;
  o.average = p.moving_average ? moving_average::on : moving_average::off;
  o.moving_average_constant = static_cast<float>(p.moving_average_constant);
  o.num_bins = p.num_bins;
  o.num_quantized_bins = p.num_quantized_bins;
  o.percentile = p.percentile;
  o.percentile_candidates = p.percentile_candidates;
  o.metric = p.lwp_mse ? lwp_metric::mse : lwp_metric::mae;
  o.minmse_mode = p.minmse_most_common ? pof2_minmse_mode::most_common : pof2_minmse_mode::all;
  o.grid = grid_of_type(r.type);
  const range_symmetry sym = s.symmetry();
  switch (o.method) {
    case quark::calib_method::percentile:
    case quark::calib_method::layerwise_percentile:
      s.hist.emplace(histogram_options{
          .mode = sym == range_symmetry::symmetric ? histogram_mode::absolute
                                                   : histogram_mode::signed_symmetric,
          .num_bins = o.num_bins.value_or(2048),
          .lump_percentile =
              lump && o.method == quark::calib_method::percentile ? o.percentile : 0.0});
      return s;
    case quark::calib_method::entropy:
      s.hist.emplace(histogram_options{.mode = histogram_mode::signed_symmetric,
                                       .num_bins = o.num_bins.value_or(128)});
      return s;
    case quark::calib_method::distribution:
      s.hist.emplace(histogram_options{.mode = histogram_mode::signed_symmetric,
                                       .num_bins = o.num_bins.value_or(2048)});
      return s;
    case quark::calib_method::float_minmse:
      if (o.num_bins.value_or(2048) == 0) {
        throw frontend_error("quark.calib.bad_option",
                             "tensor '" + name +
                                 "': MinMSE with a Float32 scale searches a histogram; NumBins 0 "
                                 "(raw data) is for power-of-two MinMSE");
      }
      s.hist.emplace(histogram_options{.mode = histogram_mode::signed_extend,
                                       .num_bins = o.num_bins.value_or(2048)});
      return s;
    case quark::calib_method::pof2_minmse:
      if (o.minmse_mode == pof2_minmse_mode::all && o.num_bins.value_or(2048) != 0) {
        if (sym != range_symmetry::symmetric) {
          throw frontend_error(
              "quark.calib.bad_option",
              "tensor '" + name + "': power-of-two MinMSE requires CalibTensorRangeSymmetric=True");
        }
        s.hist.emplace(histogram_options{.mode = histogram_mode::signed_extend,
                                         .num_bins = o.num_bins.value_or(2048),
                                         .non_finite = non_finite_policy::to_finite});
        return s;
      }
      break;
    default:
      break;
  }
  s.cal.emplace(o);
  return s;
}

/// Splits [0, n) into `parts` nearly equal pieces; piece k is [lo(k), lo(k + 1)).
std::size_t piece(std::size_t n, std::size_t parts, std::size_t k) {
  return n / parts * k + std::min(k, n % parts);
}

/// Growing batches (after the first), by what phase 2 of histogram_pieces did
/// (histogram_pieces::tally), and the batches whose extrema were found before binning.
/// Counted from any thread (the background observer's and the caller's).
struct growth_counts {
  std::atomic<std::size_t> rebinned = 0;
  std::atomic<std::size_t> tail = 0;
  std::atomic<std::size_t> extrema_first = 0;
  std::atomic<std::size_t> extrema_first_grew = 0;
  /// QUARK_CALIB_PROFILE: wall time of the threaded observation and the busy time of each
  /// thread in it (thread balance: the rest is waiting for the other thread); only for values
  /// the caller bins on the runtime's threads (not the background thread's).
  bool timed = false;
  double wall_s = 0.0;
  std::vector<double> busy_s;
};

/// Seconds since `t`.
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Batches (after the first) during which a signed histogram finds the extrema before binning.
/// A batch that grows a signed histogram is binned twice when binned first (the edges are
/// regenerated), once after a min/max pass that costs ~0.1-0.2 of a binning pass
/// (docs/bench/calib.md), so that order pays while the chance of growth exceeds ~0.15. For
/// samples alike in distribution, batch n sets a new max with chance 1/n (and a new min: 2/n for
/// the [min, max] histogram of pof2 MinMSE, 1/n for the symmetric one of ORT).
std::size_t extrema_first_batches(histogram_mode m) {
  return m == histogram_mode::signed_extend ? 6 : 3;
}

/// Whether the next batch of the slot's histogram finds its extrema before binning: the first
/// batch (its edges come from it), and a signed histogram's first extrema_first_batches batches.
bool extrema_first_next(const slot& s) {
  const histogram_mode mode = s.hist->options().mode;
  return s.hist->stats().empty() ||
         (mode != histogram_mode::absolute && s.batches < extrema_first_batches(mode));
}

/// Values per chunk that the threads of observe_parallel take in turn: a thread that starts
/// late (a worker woken from sleep) takes fewer chunks instead of making the other one wait.
/// A multiple of the binning kernel's block (only the batch's last chunk has a scalar tail),
/// large enough that the kernel's per-call setup (O(bins)) stays around 1%.
constexpr std::size_t chunk_values = std::size_t{1} << 16;
static_assert(chunk_values % quark::detail::histogram_block == 0);

/// The chunks of `x` (chunk_values each) handed out in turn to the threads of a pieces phase.
class chunk_queue {
 public:
  explicit chunk_queue(std::span<const float> x) noexcept
      : x_(x), chunks_((x.size() + chunk_values - 1) / chunk_values) {}
  /// The next chunk, or an empty span when none is left.
  std::span<const float> take() noexcept {
    const std::size_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_)
      return {};
    return x_.subspan(c * chunk_values, std::min(chunk_values, x_.size() - c * chunk_values));
  }
  /// Hands the chunks out again from the first.
  void rewind() noexcept { next_.store(0, std::memory_order_relaxed); }

 private:
  std::span<const float> x_;
  std::size_t chunks_;
  std::atomic<std::size_t> next_{0};
};

/// Bins `x` into the slot's histogram on the runtime's threads (or, with `rt` null, on this
/// thread alone) with exactly the counts, edges and range of observe(x)
/// (histogram_observer::begin_pieces: each thread bins the chunks it takes on the current edges
/// into its part; a batch that grows the range grows it once from the parts' extrema, then an
/// |x| histogram reads again only its values beyond the old last edge and a signed one is binned
/// again). In the first batches, where growth is likely, a signed histogram finds the extrema
/// first and bins once (extrema_first_batches).
void observe_parallel(slot& s, std::span<const float> x, const runtime* rt, growth_counts& growth) {
  histogram_observer& h = *s.hist;
  const std::size_t parts = rt ? rt->threads() : 1;
  const bool timed = growth.timed && rt;
  const bool first = h.stats().empty();
  const bool extrema_first = extrema_first_next(s);
  ++s.batches;
  using clock = std::chrono::steady_clock;
  const clock::time_point t0 = timed ? clock::now() : clock::time_point{};
  if (timed)
    growth.busy_s.resize(std::max(growth.busy_s.size(), parts), 0.0);
  // Part k is the k-th thread of parallel_for, which takes chunks from `queue` until none is left;
  // busy_s[k] is written by that thread only.
  chunk_queue queue(x);
  auto take = [&queue] { return queue.take(); };
  auto run = [&](auto&& phase) {
    queue.rewind();
    if (!rt) {
      phase(0);
      return;
    }
    rt->parallel_for(parts, 1, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t k = lo; k < hi; ++k) {
        const clock::time_point t = timed ? clock::now() : clock::time_point{};
        phase(k);
        if (timed)
          growth.busy_s[k] += seconds_since(t);
      }
    });
  };
  histogram_pieces b = h.begin_pieces(parts, extrema_first);
  run([&](std::size_t k) { h.observe_piece(b, k, take); });
  if (h.grow_pieces(b))
    run([&](std::size_t k) { h.finish_piece(b, k, take); });
  h.add_pieces(b);
  if (timed)
    growth.wall_s += seconds_since(t0);
  growth.rebinned += b.work().binned;
  growth.tail += b.work().tail;
  if (extrema_first && !first) {
    ++growth.extrema_first;
    growth.extrema_first_grew += b.grew() ? 1u : 0u;
  }
}

/// Completes a batch whose phase 1 the producing kernel ran chunk by chunk (calib_params::fuse):
/// range growth from the parts' extrema; then, on the runtime's threads, the whole value binned
/// (a batch whose extrema came first, or a signed histogram that grew) or the values beyond the
/// old last edge read again (an |x| histogram that grew); then the parts added (as
/// observe_parallel).
void finish_streamed(slot& s, std::span<const float> x, const runtime& rt, growth_counts& growth) {
  histogram_observer& h = *s.hist;
  histogram_pieces& b = *s.stream->pieces;
  s.seen += x.size();
  ++s.batches;
  if (h.grow_pieces(b)) {
    chunk_queue queue(x);
    auto take = [&queue] { return queue.take(); };
    rt.parallel_for(b.size(), 1, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t k = lo; k < hi; ++k)
        h.finish_piece(b, k, take);
    });
  }
  h.add_pieces(b);
  growth.tail += b.work().tail;
  growth.rebinned += b.work().binned;
  if (s.stream->counted_extrema_first) {
    ++growth.extrema_first;
    growth.extrema_first_grew += b.grew() ? 1u : 0u;
  }
}

/// First-pass observation of one value, large ones on the runtime's threads (`rt` null: all on
/// the calling thread; the background observer's way).
void observe_first(slot& s, std::span<const float> x, const runtime* rt, std::size_t threshold,
                   growth_counts& growth) {
  s.seen += x.size();
  const bool big = x.size() >= threshold && (rt == nullptr || rt->threads() > 1);
  if (s.hist) {
    if (big) {
      observe_parallel(s, x, rt, growth);
    } else {
      s.hist->observe(x);
    }
    return;
  }
  if (big && rt && s.minmax_family()) {
    // Min/max partials merge exactly.
    const std::size_t parts = rt->threads();
    std::vector<tensor_calibrator> partial(parts, tensor_calibrator(s.opt));
    rt->parallel_for(parts, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t k = b; k < e; ++k) {
        const std::size_t lo = piece(x.size(), parts, k);
        partial[k].observe(x.subspan(lo, piece(x.size(), parts, k + 1) - lo));
      }
    });
    for (const tensor_calibrator& p : partial)
      s.cal->merge(p);
    return;
  }
  s.cal->observe(x);
}

/// Margin, in bins, within which a root's kernel flags (and logs) values for its derived
/// histograms (histogram_options::derive_margin): wide enough for the rounding of chains of a
/// few float operations (a y edge's preimage lies within it of an x edge), narrow enough that
/// few more values take the kernel's exact path.
constexpr double derive_margin = 3e-4;

/// Whether a slot's histogram can be a root or a derived one (histogram_observer::observe_mapped).
bool derivable(const slot& s) {
  return s.hist && !s.cal && s.hist->options().mode == histogram_mode::signed_extend &&
         !(s.hist->options().lump_percentile > 0.0) && !s.needs_second_pass();
}

/// calib_params::derive: links each value an element-wise node (Mul, Add, Sub, or Div by the
/// constant) makes from a float value and a one-element float constant to the observed value
/// its chain of such nodes starts from (intermediate values of a chain need no slot), when both
/// have histograms observe_mapped can use. The roots' histograms get the derive margin. Returns
/// the number of derived values.
std::size_t plan_derived(const model& m, std::unordered_map<std::string, slot>& slots) {
  std::unordered_map<std::string, float> scalars;  // one-element float constants
  auto scalar_of = [&](const tensor& t, const std::string& name) {
    if (t.type() == dtype_id::float32 && t.size() == 1)
      scalars.emplace(name, t.data<float>()[0]);
  };
  for (const std::string& name : m.initializer_names())
    scalar_of(m.initializer(name), name);
  const std::vector<node_info> nodes = m.nodes();
  for (const node_info& n : nodes) {
    if (n.op_type != "Constant" || !n.domain.empty() || n.outputs.size() != 1)
      continue;
    for (const attribute& a : n.attributes) {
      if (a.name == "value" && std::holds_alternative<tensor>(a.value)) {
        scalar_of(std::get<tensor>(a.value), n.outputs[0]);
      } else if (a.name == "value_float" && std::holds_alternative<float>(a.value)) {
        scalars.emplace(n.outputs[0], std::get<float>(a.value));
      }
    }
  }
  auto usable = [&](const std::string& name) -> slot* {
    auto it = slots.find(name);
    return it != slots.end() && derivable(it->second) ? &it->second : nullptr;
  };
  struct chain {
    slot* root;
    float_chain f;
  };
  std::unordered_map<std::string, chain> chains;  // value -> its root and map
  std::size_t derived = 0;
  for (const node_info& n : nodes) {
    if (!n.domain.empty() || n.inputs.size() != 2 || n.outputs.size() != 1)
      continue;
    using op = float_chain::op;
    const auto c0 = scalars.find(n.inputs[0]);
    const auto c1 = scalars.find(n.inputs[1]);
    if ((c0 == scalars.end()) == (c1 == scalars.end()))
      continue;  // not exactly one scalar constant
    const bool const_first = c0 != scalars.end();
    const float c = const_first ? c0->second : c1->second;
    const std::string& x = const_first ? n.inputs[1] : n.inputs[0];
    op o = op::mul;
    if (n.op_type == "Mul" && c != 0.0f) {
      o = op::mul;
    } else if (n.op_type == "Add") {
      o = op::add;
    } else if (n.op_type == "Sub") {
      o = const_first ? op::rsub : op::sub;
    } else if (n.op_type == "Div" && !const_first && c != 0.0f) {
      o = op::div;
    } else {
      continue;
    }
    if (!std::isfinite(c))
      continue;
    chain ch;
    if (auto it = chains.find(x); it != chains.end()) {
      ch = it->second;
    } else if (slot* r = usable(x)) {
      ch.root = r;
    } else {
      continue;
    }
    ch.f.steps.push_back({o, c});
    const std::string& y = n.outputs[0];
    if (slot* ys = usable(y); ys != nullptr && ys != ch.root) {
      ys->derive = std::make_shared<derive_state>();
      ys->derive->root = ch.root;
      ys->derive->f = ch.f;
      if (!ch.root->derive)
        ch.root->derive = std::make_shared<derive_state>();
      ch.root->derive->dependents.push_back(ys);
      ++derived;
    }
    chains.insert_or_assign(y, std::move(ch));
  }
  for (auto& [name, sl] : slots) {
    if (sl.derive && !sl.derive->dependents.empty()) {
      histogram_options o = sl.hist->options();
      o.derive_margin = derive_margin;
      sl.hist.emplace(o);
    }
  }
  return derived;
}

void begin_second(slot& s) {
  if (s.opt.method == quark::calib_method::layerwise_percentile) {
    s.cands = layerwise_percentile_calibrator{s.opt.percentile_candidates, s.opt.metric}.candidates(
        s.hist->stats());
    s.scorer.emplace(s.cands, s.opt.grid, s.opt.metric);
  } else if (s.cal && s.cal->needs_second_pass()) {
    s.cal->begin_second_pass();
  }
}

void observe_second(slot& s, std::span<const float> x) {
  if (s.redo) {
    s.hist->observe(x);
  } else if (s.scorer) {
    s.scorer->observe(x);
  } else if (s.cal) {
    s.cal->observe_second(x);
  }
}

calibrated_range result_of(const slot& s) {
  if (s.cal)
    return s.cal->result();
  const histogram_data& h = s.hist->stats();
  // Power-of-two MinMSE histograms map NaN to 0 and +-Inf to +-FLT_MAX, as Quark's collector
  // does (numpy nan_to_num). A range reaching FLT_MAX has no usable scale (the search ended at
  // 2^128: an infinite scale was written out), so such values are refused as the other methods
  // refuse +-Inf.
  if (s.hist->options().non_finite == non_finite_policy::to_finite && h.range.count > 0 &&
      (h.range.min <= -std::numeric_limits<float>::max() ||
       h.range.max >= std::numeric_limits<float>::max())) {
    quark::detail::throw_invalid("quark.calib.infinite_input",
                                 "histogram of data containing +-Inf (or +-FLT_MAX)");
  }
  if (s.opt.method == quark::calib_method::float_minmse) {
    if (auto r = minifloat_minmse(s.type, h))  // an FP8 spec
      return *r;
  }
  switch (s.opt.method) {
    case quark::calib_method::percentile:
      return percentile_calibrator{s.opt.percentile}(h);
    case quark::calib_method::entropy:
      return entropy_calibrator{s.opt.num_quantized_bins, s.symmetry()}(h);
    case quark::calib_method::layerwise_percentile:
      return layerwise_percentile_calibrator{s.opt.percentile_candidates, s.opt.metric}.select(
          s.cands, [&](std::size_t i, const calibrated_range&) { return s.scorer->errors()[i]; });
    case quark::calib_method::float_minmse:
      return float_minmse_hist_calibrator{
          s.symmetry() == range_symmetry::symmetric ? s.pof2_grid() : s.opt.grid, s.symmetry()}(h);
    default:
      return pof2_minmse_calibrator{s.pof2_grid(), s.symmetry()}(h);
  }
}

/// SaveTensorHistFig: the slot's first-pass histogram goes into the tensor's facts.
void keep_histogram(const slot& s, tensor_facts& f) {
  if (!s.hist)
    return;
  const histogram_data& h = s.hist->stats();
  f.hist_edges = h.edges;
  f.hist_counts = h.counts;
  f.hist_absolute = h.mode == histogram_mode::absolute;
  f.data_min = h.range.min;
  f.data_max = h.range.max;
}

/// Observes values on a background thread while the runtime computes the next nodes. The
/// runtime's kernels leave part of the cores idle (small and depthwise convolutions, element-wise
/// nodes, the serial stretches between parallel regions, the wait for the slower half of a
/// split), and the observers fill that time instead of stopping the graph. The thread runs at
/// idle priority (Linux SCHED_IDLE), so it takes only cores the graph leaves free.
///
/// Memory: a queued value stays alive (the runtime then does not reuse it in place), so the
/// values held by the queue and its thread are kept under `max_bytes`; a value that does not fit
/// is observed at once by the caller, on the runtime's threads, as without the queue.
///
/// The statistics are exactly those of observing in place: the caller waits for every job at the
/// end of each sample (finish), and a value whose slot still has one queued waits for it, so each
/// slot sees its batches one at a time and in sample order; the jobs of one sample belong to
/// different slots and may run on any thread in any order. Of several failing jobs, the error of
/// the value produced first is the one reported, as in place.
class background_observer {
 public:
  /// fn(slot, values, on_caller): on_caller is true when the thread that runs the graph runs the
  /// job (it may then use the runtime's threads: the graph waits for it).
  using work = std::function<void(slot&, std::span<const float>, bool)>;

  background_observer(work fn, std::size_t max_bytes, bool timed)
      : fn_(std::move(fn)), max_bytes_(max_bytes), timed_(timed), worker_([this] { loop(); }) {}
  background_observer(const background_observer&) = delete;
  background_observer& operator=(const background_observer&) = delete;
  ~background_observer() {
    cancel();
    {
      const std::lock_guard lock(m_);
      stop_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  /// Observes `v` (a float32 value) by slot `s`: queued if it fits in the budget, else (or with
  /// `now`: a value its kernel streamed) at once on the calling thread. Either way its error
  /// is reported only if no value produced before it failed.
  /// `after_root`: a derived value whose root is queued (calib_params::derive) is queued behind
  /// it whatever the budget, and not counted in it: its job will most likely find its batch
  /// derived and only let the value go. (At most the derived values of the queued roots wait so.)
  void push(slot& s, std::shared_ptr<const tensor> v, bool now = false, bool after_root = false) {
    std::unique_lock lock(m_);
    if (s.queued)
      drain(lock);  // a second value of one slot in a sample (If branches): keep the order
    job j{&s, std::move(v), next_seq_++, !after_root};
    const std::size_t bytes = j.counted ? j.v->byte_size() : 0;
    if (now || (j.counted && held_bytes_ + bytes > max_bytes_)) {
      held_bytes_ += bytes;
      ++running_;
      run(lock, j, true);
      return;
    }
    s.queued = true;
    held_bytes_ += bytes;
    jobs_.push_back(std::move(j));
    lock.unlock();
    wake_.notify_one();
  }

  /// Runs queued jobs on the calling thread as well until all are done; rethrows the error of
  /// the first failing value.
  void finish() {
    std::unique_lock lock(m_);
    drain(lock);
    if (error_) {
      error_seq_ = no_error;
      std::rethrow_exception(std::exchange(error_, nullptr));
    }
  }

  /// Drops the queued jobs and waits for the running ones (the values they read may be the
  /// caller's feeds, about to go away).
  void cancel() noexcept {
    std::unique_lock lock(m_);
    for (job& j : jobs_) {
      j.s->queued = false;
      held_bytes_ -= j.counted ? j.v->byte_size() : 0;
    }
    jobs_.clear();
    idle_.wait(lock, [&] { return running_ == 0; });
  }

  /// QUARK_CALIB_PROFILE: seconds the background thread ran jobs, the caller ran jobs, and the
  /// caller waited at the end of a sample for a job of the background thread.
  /// Whether a value of slot `s` waits in the queue or is being observed (read under the lock:
  /// the background thread clears the flag).
  [[nodiscard]] bool holds(const slot& s) {
    const std::lock_guard lock(m_);
    return s.queued;
  }

  [[nodiscard]] std::array<double, 3> profile() {
    const std::lock_guard lock(m_);
    return {worker_busy_s_, caller_busy_s_, caller_wait_s_};
  }

 private:
  struct job {
    slot* s;
    std::shared_ptr<const tensor> v;
    std::size_t seq;  ///< production order within the calibration pass
    bool counted;     ///< its bytes are counted in held_bytes_ (push: after_root)
  };
  using clock = std::chrono::steady_clock;
  static constexpr std::size_t no_error = std::numeric_limits<std::size_t>::max();

  void drain(std::unique_lock<std::mutex>& lock) {
    while (!jobs_.empty())
      run_front(lock, true);
    if (running_ != 0) {
      const clock::time_point t = timed_ ? clock::now() : clock::time_point{};
      idle_.wait(lock, [&] { return running_ == 0; });
      if (timed_)
        caller_wait_s_ += seconds_since(t);
    }
  }

  void run_front(std::unique_lock<std::mutex>& lock, bool on_caller) {
    job j = std::move(jobs_.front());
    jobs_.pop_front();
    ++running_;
    run(lock, j, on_caller);
  }

  /// Runs `j` (counted in running_ and held_bytes_) with the lock released.
  void run(std::unique_lock<std::mutex>& lock, job& j, bool on_caller) {
    const bool skip = error_seq_ < j.seq;  // an earlier value already failed
    lock.unlock();
    const clock::time_point t = timed_ ? clock::now() : clock::time_point{};
    std::exception_ptr err;
    if (!skip) {
      try {
        fn_(*j.s, j.v->data<float>(), on_caller);
      } catch (...) {
        err = std::current_exception();
      }
    }
    const std::size_t bytes = j.counted ? j.v->byte_size() : 0;
    j.v.reset();  // the value's last holder frees it here, outside the lock
    const double took = timed_ ? seconds_since(t) : 0.0;
    lock.lock();
    (on_caller ? caller_busy_s_ : worker_busy_s_) += took;
    held_bytes_ -= bytes;
    j.s->queued = false;
    if (err && j.seq < error_seq_) {
      error_ = err;
      error_seq_ = j.seq;
    }
    if (--running_ == 0)
      idle_.notify_all();
  }

  void loop() {
#if defined(__linux__) && defined(SCHED_IDLE)
    // Only idle cores: the graph's kernels split a node evenly over the runtime's threads, so a
    // thread of theirs that waits for a core holds up the whole node. Lowering the policy needs
    // no privilege; if it is refused anyway the thread just competes as usual.
    sched_param sp{};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
#endif
    std::unique_lock lock(m_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_)
        return;
      run_front(lock, false);
    }
  }

  work fn_;
  std::size_t max_bytes_;
  bool timed_;
  std::mutex m_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<job> jobs_;
  std::size_t held_bytes_ = 0;  ///< values queued or being observed
  std::size_t running_ = 0;
  std::size_t next_seq_ = 0;
  std::exception_ptr error_;
  std::size_t error_seq_ = no_error;
  bool stop_ = false;
  double worker_busy_s_ = 0.0;
  double caller_busy_s_ = 0.0;
  double caller_wait_s_ = 0.0;
  std::thread worker_;  ///< last: starts once everything above is initialised
};

/// What a runtime error during calibration is told about the sample it ran on: its index, its
/// input shapes and, where a dim the model leaves dynamic is 1 in the sample, that random data
/// puts 1 there unless given a shape. (A model whose pooling window outgrows such an input used
/// to fail with only the pooling node named.)
std::string sample_context(const calib_sample& smp, const std::vector<input_signature>& inputs,
                           std::size_t index) {
  std::string ins, hint;
  for (const auto& in : inputs) {
    const auto it = smp.find(in.name);
    if (it == smp.end())
      continue;
    const shape_t& s = it->second.shape();
    ins += (ins.empty() ? "" : ", ") + ("'" + in.name + "' ") + dims_text(s);
    if (hint.empty() && dynamic_dim_at_one(in.shape, s)) {
      hint =
          "; the model leaves dims of '" + in.name + "' dynamic (" + dims_text(in.shape) +
          ") and this sample has 1 in one past the batch, as random data does unless its shape is "
          "given (RandomDataReaderInputShape, quark_quantize --shape " +
          in.name + ":...)";
    }
  }
  return " (calibration sample " + std::to_string(index) + ", inputs " + ins + hint + ")";
}

/// Runs every sample of `reader` (at most `limit`) through `rt`, calling fn(slot, values) for
/// each observed float value, in place or (`bg` not null) as a job of the background observer,
/// which then runs fn. Lookups follow the runtime's fixed production order, so a value is found
/// without building a string key.
template <class Fn>
std::size_t for_each_sample(const runtime& rt, calibration_data_reader& reader,
                            std::optional<std::size_t> limit,
                            std::unordered_map<std::string, slot>& slots,
                            const std::vector<input_signature>& inputs,
                            const std::function<void(std::string_view, const tensor&)>& on_first,
                            const std::function<void(std::size_t)>& on_sample,
                            background_observer* bg, Fn&& fn, const chunk_request& chunks = {},
                            const std::function<derive_route(slot&)>& route = {}) {
  std::vector<std::pair<std::string, slot*>> order;
  std::size_t samples = 0;
  // On an error the background jobs stop before the sample (maybe read by one) goes away.
  struct cancel_on_error {
    background_observer* bg;
    int uncaught = std::uncaught_exceptions();
    ~cancel_on_error() {
      if (bg && std::uncaught_exceptions() > uncaught)
        bg->cancel();
    }
  };
  while (!limit || samples < *limit) {
    std::optional<calib_sample> smp = reader.next();
    if (!smp)
      break;
    const cancel_on_error guard{bg};
    check_sample(*smp, inputs, samples);
    std::size_t k = 0;
    const bool first = samples == 0;
    const shared_value_observer observe = [&](std::string_view name,
                                              std::shared_ptr<const tensor> value) {
      const tensor& t = *value;
      slot* s = nullptr;
      if (k < order.size() && order[k].first == name) {
        s = order[k].second;
      } else {
        if (on_first && first)
          on_first(name, t);
        auto it = slots.find(std::string(name));
        s = it == slots.end() ? nullptr : &it->second;
        if (first)
          order.emplace_back(std::string(name), s);
      }
      ++k;
      if (s == nullptr || s->dropped || t.type() != dtype_id::float32)
        return;
      const derive_route way = route ? route(*s) : derive_route::observe;
      if (way == derive_route::derived)
        return;
      // A sink was offered for this value (calib_params::fuse): if its kernel streamed nothing,
      // the value is observed as usual; else the caller completes the batch at once (never
      // queued; in the background observer's order, so an error of a value still queued
      // before it is the one reported).
      const bool streamed = s->stream && s->stream->pieces;
      if (streamed && s->stream->values.load(std::memory_order_relaxed) == 0)
        s->stream->pieces.reset();
      if (bg) {
        bg->push(*s, std::move(value), streamed && s->stream->pieces,
                 way == derive_route::behind_root);
      } else {
        fn(*s, t.data<float>());
      }
    };
    try {
      rt.run(*smp, observe, chunks);
    } catch (const frontend_error& e) {
      throw frontend_error(e.id(), e.message() + sample_context(*smp, inputs, samples));
    }
    if (bg)
      bg->finish();
    ++samples;
    if (on_sample)
      on_sample(samples);
  }
  return samples;
}

nlohmann::json facts_to_json(const calib_output& out) {
  nlohmann::json t = nlohmann::json::object();
  for (const auto& [name, f] : out.tensors) {
    nlohmann::json e = {{"type", std::string(dtype_name(f.type))}, {"shape", f.shape}};
    if (f.calibrated) {
      calibrated_range r;
      r.min = f.rmin;
      r.max = f.rmax;
      r.pof2_position = f.pof2_position;
      r.warnings = f.warnings;
      e["range"] = r;
      if (f.std_dev != 0.0)
        e["std_dev"] = f.std_dev;
    }
    t[name] = std::move(e);
  }
  return {{"format", "quark-cpp calibration"},
          {"version", 1},
          {"samples", out.samples},
          {"tensors", std::move(t)}};
}

calib_output facts_from_json(const std::filesystem::path& file,
                             const std::map<std::string, calib_request>& requests) {
  calib_output out;
  try {
    std::ifstream in(file);
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.value("format", "") != "quark-cpp calibration")
      throw frontend_error("quark.calib.restore", "not a quark-cpp calibration file");
    out.samples = quark::detail::int_from_json<std::size_t>(j.at("samples"), "samples");
    for (const auto& [name, e] : j.at("tensors").items()) {
      tensor_facts f;
      const auto t = dtype_from_name(e.at("type").get<std::string>());
      f.type = t ? *t : dtype_id::undefined;
      for (const auto& d : e.at("shape"))
        f.shape.push_back(quark::detail::int_from_json<std::int64_t>(d, "shape"));
      if (e.contains("range")) {
        const auto r = e.at("range").get<calibrated_range>();
        f.calibrated = true;
        f.rmin = r.min;
        f.rmax = r.max;
        f.pof2_position = r.pof2_position;
        f.warnings = r.warnings;
        f.std_dev = e.value("std_dev", 0.0);
      }
      out.tensors.emplace(name, std::move(f));
    }
  } catch (const nlohmann::json::exception& e) {
    throw frontend_error("quark.calib.restore",
                         "SaveAndRestore file '" + file.string() + "' is malformed: " + e.what());
  } catch (const quark::invalid_argument& e) {
    throw frontend_error("quark.calib.restore", "SaveAndRestore file '" + file.string() +
                                                    "' is malformed: " + e.message());
  }
  for (const auto& [name, f] : out.tensors) {
    if (const std::string bad = bad_pof2_position(f.pof2_position); !bad.empty()) {
      throw frontend_error("quark.calib.restore", "SaveAndRestore file '" + file.string() +
                                                      "': tensor '" + name + "': " + bad);
    }
  }
  for (const auto& [name, r] : requests) {
    auto it = out.tensors.find(name);
    if (it != out.tensors.end() && it->second.type == dtype_id::float32 && !it->second.calibrated) {
      throw frontend_error("quark.calib.restore", "SaveAndRestore file '" + file.string() +
                                                      "' has no range for tensor '" + name +
                                                      "' (delete it to calibrate again)");
    }
  }
  return out;
}

/// Each calibrated tensor's range (or standard deviation) from its slot's observer, into
/// out.tensors.
void collect_results(std::unordered_map<std::string, slot>& slots, const calib_params& params,
                     calib_output& out) {
  for (auto& [name, s] : slots) {
    auto it = out.tensors.find(name);
    if (s.dropped || it == out.tensors.end() || it->second.type != dtype_id::float32)
      continue;
    tensor_facts& f = it->second;
    f.calibrated = true;
    if (s.seen == 0)
      continue;  // an empty value: range (0, 0)
    if (params.keep_histograms)
      keep_histogram(s, f);
    if (s.opt.method == quark::calib_method::distribution) {
      // FP8 (quark-spec §4.4): the scale comes from the standard deviation; the range is the
      // histogram's.
      const histogram_data& h = s.hist->stats();
      if (h.total() > 0) {
        f.std_dev = distribution_calibrator{}(h).std_dev;
        f.rmin = static_cast<float>(h.edges.front());
        f.rmax = static_cast<float>(h.edges.back());
      }
      continue;
    }
    try {
      const calibrated_range r = result_of(s);
      f.rmin = r.min;
      f.rmax = r.max;
      f.pof2_position = r.pof2_position;
      f.warnings = r.warnings;
    } catch (const quark::error& e) {
      throw calibration_error(name, e);
    }
  }
}

}  // namespace

std::vector<input_signature> model_inputs(const std::string& model_bytes,
                                          const std::filesystem::path& base_dir) {
  return signatures(make_runtime(model_bytes, base_dir));
}

calib_output calibrate(const model& m, const std::map<std::string, calib_request>& requests,
                       calibration_data_reader& reader, const calib_params& params) {
  const runtime rt(m);
  if (params.ranges_file && std::filesystem::exists(*params.ranges_file)) {
    calib_output out = facts_from_json(*params.ranges_file, requests);
    out.inputs = signatures(rt);
    return out;
  }
  calib_output out;
  out.inputs = signatures(rt);
  std::unordered_map<std::string, slot> slots;
  // Lumping may need a second pass (calib_params::lump).
  const bool lump = params.lump && !params.keep_histograms && reader.can_rewind();
  for (const auto& [name, r] : requests)
    slots.emplace(name, make_slot(name, r, params, lump));
  const std::size_t derived_values = params.derive ? plan_derived(m, slots) : 0;
  const std::size_t total = params.max_samples ? *params.max_samples : reader.size().value_or(0);
  // The time of each phase goes to stderr (docs/bench/quantizer.md).
  using clock = std::chrono::steady_clock;
  const bool profile = params.profile;
  const auto since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  double observe_s = 0.0;
  std::size_t dropped = 0;
  growth_counts growth;
  growth.timed = profile;
  // calib_params::derive. A derived value's batch of a sample is taken once, under derive_mx:
  // derived when its root completes its batch (try_derive), or claimed to be observed as usual
  // when the value's own observation comes first (its batch not derivable, its root not observed
  // in this sample, or its job run while its root's job still runs on the other thread; a value
  // whose root is still queued is queued behind it). sample_no is the sample being run.
  std::mutex derive_mx;
  std::atomic<std::size_t> sample_no{0};
  std::atomic<std::size_t> derived_batches{0};
  auto try_derive = [&](slot& y, std::size_t now) {
    // A slot dropped after the first sample was made again without its derive state.
    if (y.dropped || !y.derive || y.derive->root->dropped || !y.derive->root->derive)
      return;
    derive_state& d = *y.derive;
    const derive_state& r = *d.root->derive;
    if (d.claimed == now || r.done != now)
      return;
    if (y.hist->observe_mapped(*d.root->hist, d.f, d.map)) {
      d.claimed = now;
      d.derived = true;
      y.seen += r.last_size;
      ++y.batches;
      ++derived_batches;
    }
  };
  // True when the value's batch of this sample was derived; else it is claimed for observing.
  auto claim = [&](slot& y) {
    const std::lock_guard lock(derive_mx);
    derive_state& d = *y.derive;
    const std::size_t now = sample_no.load();
    if (d.claimed == now)
      return d.derived;
    d.claimed = now;
    d.derived = false;
    return false;
  };
  auto root_done = [&](slot& r, std::size_t size) {
    const std::lock_guard lock(derive_mx);
    const std::size_t now = sample_no.load();
    r.derive->done = now;
    r.derive->last_size = size;
    for (slot* y : r.derive->dependents)
      try_derive(*y, now);
  };
  // Background observation: the first pass's jobs bin on their own thread (observe_first with no
  // runtime); in place, large values are binned on the runtime's threads between two nodes.
  auto first_pass = [&](slot& s, std::span<const float> x, bool on_caller) {
    try {
      if (s.derive && s.derive->root && claim(s))
        return;  // derived from its root's batch
      bool done = false;
      if (s.stream && s.stream->pieces) {
        // Streamed by its kernel (always on the caller: for_each_sample does not queue it).
        // A kernel that streamed only part of the value (none does) falls back to observing it.
        done = s.stream->values.load() == x.size();
        if (done)
          finish_streamed(s, x, rt, growth);
        s.stream->pieces.reset();
      }
      if (!done)
        observe_first(s, x, on_caller ? &rt : nullptr, params.parallel_min_elements, growth);
      if (s.derive && !s.derive->dependents.empty())
        root_done(s, x.size());
    } catch (const frontend_error&) {
      throw;
    } catch (const quark::error& e) {
      throw calibration_error(s.name, e);
    }
  };
  std::optional<background_observer> bg1;
  try {
    if (params.background)
      bg1.emplace(first_pass, params.background_max_bytes, profile);
  } catch (const std::system_error&) {
    // No thread to be had: observe in place (bg1 stays empty).
  }
  // calib_params::fuse: a sink for the values of histograms that have no value with the
  // background thread (which would write the histogram the sink reads). Past the batches whose
  // extrema come first the chunks are binned as they come; in those batches only their extrema
  // are taken, and the value is binned after the node. The kernel decides
  // whether it streams (large element-wise binary outputs); a value it did not stream is observed
  // as usual.
  chunk_request streams;
  if (params.fuse) {
    streams = [&](std::string_view name) -> const chunk_sink* {
      auto it = slots.find(std::string(name));
      if (it == slots.end())
        return nullptr;
      slot& s = it->second;
      if (s.dropped || (bg1 && bg1->holds(s)) || !s.hist)
        return nullptr;
      if (s.derive && s.derive->root) {
        // Its root still queued: the value is queued behind it (for_each_sample), not streamed.
        // Else its batch was derived when the root completed, or is taken here.
        if (bg1 && bg1->holds(*s.derive->root))
          return nullptr;
        if (claim(s))
          return nullptr;
      }
      if (!s.stream) {
        s.stream = std::make_shared<slot::streamed>();
        histogram_observer* h = &*s.hist;
        slot::streamed* st = s.stream.get();
        st->sink = [h, st](std::size_t part, const value_chunk& chunk) {
          std::size_t r = 0;  // one observe_piece call (one fold of the counts) per chunk
          h->observe_piece(*st->pieces, part, [&]() -> std::span<const float> {
            return r < chunk.rows ? chunk.row(r++) : std::span<const float>{};
          });
          st->values.fetch_add(chunk.size(), std::memory_order_relaxed);
        };
      }
      // A batch whose extrema come first (extrema_first_next) gets them from the chunks, and
      // finish_streamed bins it once the range is known.
      const bool extrema_first = extrema_first_next(s);
      s.stream->counted_extrema_first = extrema_first && !s.hist->stats().empty();
      s.stream->pieces.emplace(s.hist->begin_pieces(rt.threads(), extrema_first));
      s.stream->values.store(0, std::memory_order_relaxed);
      return &s.stream->sink;
    };
  }
  const clock::time_point t_first = clock::now();
  out.samples = for_each_sample(
      rt, reader, params.max_samples, slots, out.inputs,
      [&](std::string_view name, const tensor& t) {
        auto& f = out.tensors[std::string(name)];
        f.type = t.type();
        f.shape = t.shape();
      },
      [&](std::size_t done) {
        sample_no.store(done);
        if (done == 1 && params.after_first_sample) {
          for (const std::string& name : params.after_first_sample(out.tensors)) {
            auto it = slots.find(name);
            if (it != slots.end()) {
              it->second = make_slot(name, requests.at(name), params, false);  // frees its state
              it->second.dropped = true;
              ++dropped;
            }
          }
        }
        if (params.progress)
          params.progress(done, total);
      },
      bg1 ? &*bg1 : nullptr,
      [&](slot& s, std::span<const float> x) {
        const clock::time_point t = profile ? clock::now() : clock::time_point{};
        first_pass(s, x, true);
        if (profile)
          observe_s += since(t);
      },
      streams,
      [&](slot& s) {
        if (!s.derive || !s.derive->root)
          return derive_route::observe;
        if (bg1 && bg1->holds(*s.derive->root))
          return derive_route::behind_root;
        const std::lock_guard lock(derive_mx);
        return s.derive->claimed == sample_no.load() && s.derive->derived ? derive_route::derived
                                                                          : derive_route::observe;
      });
  const double first_s = since(t_first);
  const bool backgrounded = bg1.has_value();
  const std::array<double, 3> bg_profile = bg1 ? bg1->profile() : std::array<double, 3>{};
  bg1.reset();
  if (backgrounded)
    observe_s = bg_profile[1] + bg_profile[2];  // the graph stopped for observers
  if (out.samples == 0) {
    throw frontend_error("quark.calib_data.empty", "the calibration data holds no sample");
  }
  // Second pass (LayerwisePercentile scoring, pof2 MinMSE on raw data, a lumped Percentile
  // histogram whose percentile it cannot decide): the same samples again.
  bool second = false;
  std::size_t lumped = 0;
  std::size_t redone = 0;
  for (auto& [name, s] : slots) {
    lumped += s.hist && s.hist->stats().lump_end != 0 ? 1u : 0u;
    if (!s.dropped && s.seen > 0 && s.needs_second_pass()) {
      begin_second(s);
      second = true;
    } else if (!s.dropped && s.seen > 0 && s.lump_undecided()) {
      histogram_options o = s.hist->options();
      o.lump_percentile = 0.0;
      s.hist.emplace(o);
      s.redo = true;
      second = true;
      ++redone;
    }
  }
  const clock::time_point t_second = clock::now();
  if (second) {
    reader.rewind();
    std::optional<background_observer> bg2;
    try {
      if (params.background)
        bg2.emplace([](slot& s, std::span<const float> x, bool) { observe_second(s, x); },
                    params.background_max_bytes, false);
    } catch (const std::system_error&) {
    }
    for_each_sample(rt, reader, out.samples, slots, out.inputs, {}, {}, bg2 ? &*bg2 : nullptr,
                    [&](slot& s, std::span<const float> x) { observe_second(s, x); });
  }
  const double second_s = since(t_second);
  const clock::time_point t_results = clock::now();
  collect_results(slots, params, out);
  if (profile) {
    std::fprintf(stderr,
                 "calibration profile: %zu samples; %zu of %zu tensors observed after the "
                 "first; pass 1 %.3f s (of which the graph stopped for observers %.3f s); "
                 "pass 2 %.3f s; calibrators %.3f s; threaded growing batches: %zu binned "
                 "again, %zu read again beyond the old last edge; %zu batches extrema first "
                 "(%zu grew); %zu percentile histograms lumped, %zu of them observed again "
                 "unlumped\n",
                 out.samples, slots.size() - dropped, slots.size(), first_s, observe_s, second_s,
                 since(t_results), growth.rebinned.load(), growth.tail.load(),
                 growth.extrema_first.load(), growth.extrema_first_grew.load(), lumped, redone);
    if (params.derive) {
      std::fprintf(stderr,
                   "calibration profile: %zu values derived from another one's batch where "
                   "exact: %zu batches derived\n",
                   derived_values, derived_batches.load());
    }
    std::string busy;
    for (const double b : growth.busy_s) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.3f", busy.empty() ? "" : " / ", b);
      busy += buf;
    }
    if (backgrounded) {
      std::fprintf(stderr,
                   "calibration profile: background observation: its thread busy %.3f s, the "
                   "caller ran jobs %.3f s and waited %.3f s at sample ends\n",
                   bg_profile[0], bg_profile[1], bg_profile[2]);
    } else {
      std::fprintf(
          stderr,
          "calibration profile: threaded histograms %.3f s, each thread's pieces busy %s s\n",
          growth.wall_s, busy.c_str());
    }
  }
  if (params.ranges_file) {
    std::ofstream os(*params.ranges_file);
    os << facts_to_json(out).dump(1) << '\n';
    if (!os) {
      throw frontend_error("quark.calib.save", "cannot write SaveAndRestore file '" +
                                                   params.ranges_file->string() + "'");
    }
  }
  return out;
}

std::vector<std::pair<std::string, tensor>> run_model(const std::string& model_bytes,
                                                      const std::filesystem::path& base_dir,
                                                      const calib_sample& sample) {
  const runtime rt = make_runtime(model_bytes, base_dir);
  auto res = rt.run(sample);
  std::vector<std::pair<std::string, tensor>> out;
  for (const auto& o : rt.outputs()) {
    auto it = res.find(o.name);
    if (it != res.end())
      out.emplace_back(o.name, std::move(it->second));
  }
  return out;
}

}  // namespace quark::onnx::qz

#include <quark/metrics.hpp>

namespace quark::onnx::qz {

eval_report compare_models(const std::string& float_bytes, const std::string& quant_bytes,
                           const std::filesystem::path& base_dir, calibration_data_reader& reader,
                           std::size_t samples) {
  const runtime ref = make_runtime(float_bytes, base_dir);
  const runtime q = make_runtime(quant_bytes, base_dir);
  if (ref.outputs().empty())
    throw frontend_error("quark.eval.no_output", "the model has no output");
  const std::string out0 = ref.outputs().front().name;
  const std::vector<input_signature> inputs = signatures(ref);
  metrics::summary cos, l2, psnr, ssim;
  eval_report r;
  while (r.samples < samples) {
    auto s = reader.next();
    if (!s)
      break;
    check_sample(*s, inputs, r.samples, "evaluation sample");
    // A float16 output (a float16 model) is compared in float32, its values widened exactly;
    // integer, bool, float8 and int4 outputs (an ArgMax, a Cast, a comparison) by their values
    // as float, as the auto mixed precision search measures them.
    const auto measured = [&out0](tensor t, const char* which) {
      const dtype_id type = t.type();
      auto f = numeric_as_float32(std::move(t));
      if (!f) {
        throw frontend_error("quark.eval.type", std::string(which) + " model's output '" + out0 +
                                                    "' is " + std::string(dtype_name(type)) +
                                                    ", which has no distance to measure");
      }
      return std::move(*f);
    };
    const auto a = measured(ref.run(*s).at(out0), "the float");
    const auto b = measured(q.run(*s).at(out0), "the quantized");
    if (a.size() != b.size()) {
      throw frontend_error("quark.eval.shape",
                           "output '" + out0 + "': the float model gives " +
                               std::to_string(a.size()) + " values, the quantized model " +
                               std::to_string(b.size()) + " (evaluation sample " +
                               std::to_string(r.samples) + ")");
    }
    const auto x = a.data<float>();
    const auto y = b.data<float>();
    cos.add(metrics::cosine(x, y));
    l2.add(metrics::l2_distance(x, y));
    psnr.add(metrics::psnr(x, y));
    ssim.add(metrics::ssim_global(x, y));
    ++r.samples;
  }
  r.cosine_undefined = cos.undefined;
  r.cosine_mean = cos.mean();
  r.cosine_min = cos.count ? cos.min : std::numeric_limits<double>::quiet_NaN();
  r.l2_mean = l2.mean();
  r.l2_max = l2.max;
  r.psnr_mean = psnr.mean();
  r.psnr_min = psnr.min;
  r.ssim_mean = ssim.mean();
  r.ssim_min = ssim.min;
  return r;
}

}  // namespace quark::onnx::qz

namespace quark::onnx {

std::map<std::string, tensor> run_model(const std::filesystem::path& model_path,
                                        const calib_sample& sample) {
  const runtime rt(model_path);
  return rt.run(sample);
}

double time_inference(const std::filesystem::path& model_path, calibration_data_reader& reader,
                      std::size_t samples) {
  const runtime rt(model_path);
  double seconds = 0.0;
  for (std::size_t i = 0; i < samples; ++i) {
    auto s = reader.next();
    if (!s)
      break;
    const auto t0 = std::chrono::steady_clock::now();
    (void)rt.run(*s);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return seconds;
}

}  // namespace quark::onnx
