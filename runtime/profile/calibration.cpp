#include "runtime/profile/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/json_fields.hpp"
#include "runtime/core/log.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/profile/text_comm.hpp"
#include "runtime/profile/util.hpp"

namespace saturn::profile {

const char* coll_op_name(CollOp op) {
  switch (op) {
    case CollOp::kAllreduce:
      return "allreduce";
    case CollOp::kAllGather:
      return "all_gather";
    case CollOp::kReduceScatter:
      return "reduce_scatter";
    case CollOp::kSendRecv:
      return "send_recv";
  }
  return "?";
}

// ---- the compute model ------------------------------------------------------------------------

double Calibration::gemm_seconds(double flops) const {
  if (flops <= 0) return 0;
  if (gemm_rate.empty()) return flops / 2e10;
  if (flops <= gemm_rate.front().first) return flops / gemm_rate.front().second;
  if (flops >= gemm_rate.back().first) return flops / gemm_rate.back().second;
  const double x = std::log(flops);
  for (std::size_t i = 1; i < gemm_rate.size(); ++i) {
    if (flops > gemm_rate[i].first) continue;
    const double x0 = std::log(gemm_rate[i - 1].first), x1 = std::log(gemm_rate[i].first);
    const double w = x1 > x0 ? (x - x0) / (x1 - x0) : 0.0;
    const double rate =
        gemm_rate[i - 1].second + w * (gemm_rate[i].second - gemm_rate[i - 1].second);
    return flops / rate;
  }
  return flops / gemm_rate.back().second;
}

double Calibration::gemm_seconds(const GemmShape& shape) const {
  for (const auto& g : gemm_shapes)
    if (g.shape == shape) return g.seconds;
  return gemm_seconds(2.0 * shape[0] * shape[1] * shape[2]);
}

bool Calibration::has_gemm_shape(const GemmShape& shape) const {
  return std::any_of(gemm_shapes.begin(), gemm_shapes.end(),
                     [&](const GemmShapeTime& g) { return g.shape == shape; });
}

namespace {

// Local (in, out) of each linear of a block; tensor parallelism splits heads and MLP columns.
std::vector<std::pair<double, double>> block_linears(const ModelConfig& m, int tp) {
  const double C = m.d_model, F = m.ffn_dim(), KV = m.kv_dim(), Q = m.q_dim(), t = std::max(tp, 1);
  if (m.arch == Arch::kGpt2) return {{C, 3 * C / t}, {C / t, C}, {C, F / t}, {F / t, C}};
  return {{C, Q / t}, {C, KV / t}, {C, KV / t}, {Q / t, C}, {C, F / t}, {C, F / t}, {F / t, C}};
}

GemmShape shape_of(double n, double in, double out) {
  return {static_cast<int>(std::lround(n)), static_cast<int>(std::lround(in)),
          static_cast<int>(std::lround(out))};
}

}  // namespace

std::vector<GemmShape> model_gemm_shapes(const ModelConfig& m, int B, int T, int tp) {
  const double N = static_cast<double>(B) * T;
  std::vector<GemmShape> out;
  for (const auto& [in, o] : block_linears(m, tp)) out.push_back(shape_of(N, in, o));
  out.push_back(shape_of(N, m.d_model, m.vocab_size));
  return out;
}

ComputeFeatures Calibration::features(const ModelConfig& m, int B, int T, int tp) const {
  ComputeFeatures f;
  const double N = static_cast<double>(B) * T, C = m.d_model, F = m.ffn_dim(), V = m.vocab_size,
               H = m.n_head, L = m.n_layer, t = std::max(tp, 1);
  // Each linear is three GEMMs of equal FLOPs: forward, input gradient, weight gradient. A
  // shape measured on the device is timed as measured; others by their FLOPs.
  const auto linear_s = [&](double in, double out) {
    return gemm_shapes.empty() ? gemm_seconds(2 * N * in * out)
                               : gemm_seconds(shape_of(N, in, out));
  };
  for (const auto& [in, out] : block_linears(m, tp)) f.gemm_s += 3 * L * linear_s(in, out);
  f.gemm_s += 3 * linear_s(C, V);  // the head (replicated under tp)
  // Attention work relative to plain causal attention, whose T·T/2 scores the fit measures as
  // "T": a window W < T leaves each query W keys but the first W rows (2W - W²/T in the same
  // units), plus the tile of 64 rows both backends compute whole (cpu/attention.cpp,
  // cuda/attention.cu).
  // Layer by layer: Gemma 2 windows only its even layers.
  double spans = 0;
  for (int l = 0; l < m.n_layer; ++l) {
    const double W = m.window(l);
    spans += W > 0 && W < T ? std::min<double>(T, 2 * W - W * W / T + 64) : T;
  }
  f.attn_flops = 12.0 * N * spans * m.q_dim() / t;
  // Norms, residuals, biases, activations and the softmax rows of every block (Gemma 2: two more
  // norms, capped scores), then the loss (and capped logits).
  const double per_block =
      8 * C + 3 * F / t + H / t * T * (m.attn_softcap > 0 ? 2 : 1) + (m.post_norms ? 6 * C : 0);
  f.elem_units = N * (L * per_block + (m.final_softcap > 0 ? 5 : 3) * V + 2 * C);
  return f;
}

double Calibration::micro_batch_seconds(const ModelConfig& model, int B, int T, int tp) const {
  const ComputeFeatures f = features(model, B, T, tp);
  return gemm_scale * f.gemm_s + attn_s_per_flop * f.attn_flops + elem_s_per_unit * f.elem_units;
}

bool Calibration::has_inter_node() const {
  for (const auto& [op, fits] : links)
    for (const auto& l : fits)
      if (l.inter_node) return true;
  return false;
}

double Calibration::comm_seconds(CollOp op, int group, bool inter_node, double calls,
                                 double bytes) const {
  if (group <= 1 || (calls <= 0 && bytes <= 0)) return 0;
  const auto it = links.find(coll_op_name(op));
  LinkFit fit{2, false, 5e-6, 2e-10, 0};
  if (it != links.end() && !it->second.empty()) {
    const bool any_inter = std::any_of(it->second.begin(), it->second.end(),
                                       [](const LinkFit& l) { return l.inter_node; });
    const bool want_inter = inter_node && any_inter;
    int best_gap = std::numeric_limits<int>::max();
    for (const auto& l : it->second) {
      if (l.inter_node != want_inter) continue;
      const int gap = std::abs(l.group - group);
      if (gap < best_gap) {
        best_gap = gap;
        fit = l;
      }
    }
  }
  // Scale from the measured group size as ring algorithms scale: latency with the number of
  // steps (g-1), bandwidth with the fraction of the buffer each rank moves.
  const double g = group, g0 = std::max(fit.group, 2);
  double a = fit.alpha_s, b = fit.beta_s_per_byte;
  if (op != CollOp::kSendRecv && fit.group != group) {
    a *= (g - 1) / (g0 - 1);
    if (op == CollOp::kAllGather)
      b *= (g - 1) / (g0 - 1);
    else
      b *= ((g - 1) / g) / ((g0 - 1) / g0);
  }
  return calls * a + bytes * b;
}

double Calibration::sync_seconds(int group, bool inter_node, double points) const {
  if (group <= 1 || points <= 0) return 0;
  const auto it = links.find(coll_op_name(CollOp::kAllreduce));
  if (it == links.end()) return 0;
  const LinkFit* best = nullptr;
  for (const auto& l : it->second)
    if (l.inter_node == (inter_node && has_inter_node()) &&
        (!best || std::abs(l.group - group) < std::abs(best->group - group)))
      best = &l;
  return best ? points * best->sync_s : 0.0;
}

// ---- serialisation ----------------------------------------------------------------------------

namespace {

// gemm_rate, gemm_shapes and links (arrays and a map) are written and read apart. Optional:
// absent in records written before the field (device and timer: those are the CPU's).
constexpr auto kCalibrationFields = std::make_tuple(
    json_fields::field("hardware_id", &Calibration::hardware_id),
    json_fields::optional_field("device", &Calibration::device),
    json_fields::optional_field("timer", &Calibration::timer),
    json_fields::optional_field("copy_pinned", &Calibration::copy_pinned),
    json_fields::field("created_utc", &Calibration::created_utc),
    json_fields::field("seconds", &Calibration::seconds),
    json_fields::optional_field("quick", &Calibration::quick),
    json_fields::field("gemm_scale", &Calibration::gemm_scale),
    json_fields::field("attn_s_per_flop", &Calibration::attn_s_per_flop),
    json_fields::field("elem_s_per_unit", &Calibration::elem_s_per_unit),
    json_fields::field("compute_fit_error", &Calibration::compute_fit_error),
    json_fields::field("optimizer_s_per_param", &Calibration::optimizer_s_per_param),
    json_fields::field("copy_bytes_per_s", &Calibration::copy_bytes_per_s),
    json_fields::field("overlap", &Calibration::overlap),
    json_fields::optional_field("probe_flops_per_s", &Calibration::probe_flops_per_s));

constexpr auto kWriteRateFields =
    std::make_tuple(json_fields::field("latency_s", &WriteRates::latency_s),
                    json_fields::field("bytes_per_s", &WriteRates::bytes_per_s),
                    json_fields::field("dataset_s", &WriteRates::dataset_s));

constexpr auto kLinkFields =
    std::make_tuple(json_fields::field("group", &LinkFit::group),
                    json_fields::field("inter_node", &LinkFit::inter_node),
                    json_fields::field("alpha_s", &LinkFit::alpha_s),
                    json_fields::field("beta_s_per_byte", &LinkFit::beta_s_per_byte),
                    json_fields::field("fit_error", &LinkFit::fit_error),
                    json_fields::optional_field("sync_s", &LinkFit::sync_s));

}  // namespace

nlohmann::json Calibration::to_json() const {
  nlohmann::json j = json_fields::object_of(*this, kCalibrationFields);
  nlohmann::json gemm = nlohmann::json::array();
  for (const auto& [flops, rate] : gemm_rate) gemm.push_back({flops, rate});
  j["gemm_rate"] = std::move(gemm);
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& g : gemm_shapes)
    shapes.push_back({g.shape[0], g.shape[1], g.shape[2], g.seconds});
  j["gemm_shapes"] = std::move(shapes);
  nlohmann::json l = nlohmann::json::object();
  for (const auto& [op, fits] : links) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& f : fits) arr.push_back(json_fields::object_of(f, kLinkFields));
    l[op] = arr;
  }
  j["links"] = std::move(l);
  nlohmann::json sync = nlohmann::json::object();
  for (const auto& [group, s] : contended_sync_s) sync[std::to_string(group)] = s;
  j["contended_sync_s"] = std::move(sync);
  nlohmann::json writes = nlohmann::json::object();
  for (const auto& [file_system, w] : checkpoint_writes)
    writes[file_system] = json_fields::object_of(w, kWriteRateFields);
  j["checkpoint_writes"] = std::move(writes);
  return j;
}

namespace {

int group_size_key(const std::string& key) {
  int group = 0;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), group);
  if (ec != std::errc() || end != key.data() + key.size() || group < 1)
    throw InputError(fmt::format(
        "calibration record: contended_sync_s key '{}' is not a group size (a positive integer)",
        key));
  return group;
}

}  // namespace

Calibration Calibration::from_json(const nlohmann::json& j) {
  Calibration c;
  try {
    json_fields::read_fields(j, c, kCalibrationFields, "");
    for (const auto& p : j.at("gemm_rate")) c.gemm_rate.emplace_back(p.at(0), p.at(1));
    if (j.contains("gemm_shapes"))
      for (const auto& g : j.at("gemm_shapes"))
        c.gemm_shapes.push_back(GemmShapeTime{
            {g.at(0).get<int>(), g.at(1).get<int>(), g.at(2).get<int>()}, g.at(3).get<double>()});
    for (const auto& [op, arr] : j.at("links").items())
      for (std::size_t i = 0; i < arr.size(); ++i)
        json_fields::read_fields(arr.at(i), c.links[op].emplace_back(), kLinkFields,
                                 fmt::format("links.{}[{}]", op, i));
    // Absent in calibrations from before the trials kept their probes here.
    if (j.contains("contended_sync_s"))
      for (const auto& [group, s] : j.at("contended_sync_s").items())
        c.contended_sync_s[group_size_key(group)] = s.get<double>();
    if (j.contains("checkpoint_writes"))
      for (const auto& [file_system, w] : j.at("checkpoint_writes").items())
        json_fields::read_fields(w, c.checkpoint_writes[file_system], kWriteRateFields,
                                 "checkpoint_writes." + file_system);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("calibration record: {}", e.what()));
  }
  return c;
}

Calibration nominal_calibration() {
  Calibration c;
  c.hardware_id = "nominal";
  c.gemm_rate = {{1e6, 1e10}, {1e8, 2e10}};
  c.attn_s_per_flop = 1.0 / 5e9;
  c.elem_s_per_unit = 2e-9;
  c.optimizer_s_per_param = 5e-9;
  c.copy_bytes_per_s = 5e9;
  for (CollOp op :
       {CollOp::kAllreduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kSendRecv})
    c.links[coll_op_name(op)] = {LinkFit{2, false, 5e-6, 2e-10, 0}};
  return c;
}

// ---- fitting ----------------------------------------------------------------------------------

namespace {

// Solves the normal equations of the columns in `active` (Gaussian elimination, partial pivot);
// false when singular.
bool least_squares(const std::vector<std::vector<double>>& X, const std::vector<double>& y,
                   const std::vector<std::size_t>& active, std::vector<double>& w) {
  const std::size_t k = active.size();
  std::vector<std::vector<double>> A(k, std::vector<double>(k + 1, 0.0));
  for (std::size_t r = 0; r < X.size(); ++r)
    for (std::size_t i = 0; i < k; ++i) {
      for (std::size_t j = 0; j < k; ++j) A[i][j] += X[r][active[i]] * X[r][active[j]];
      A[i][k] += X[r][active[i]] * y[r];
    }
  for (std::size_t c = 0; c < k; ++c) {
    std::size_t p = c;
    for (std::size_t r = c + 1; r < k; ++r)
      if (std::abs(A[r][c]) > std::abs(A[p][c])) p = r;
    if (std::abs(A[p][c]) < 1e-300) return false;
    std::swap(A[p], A[c]);
    for (std::size_t r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = A[r][c] / A[c][c];
      for (std::size_t j = c; j <= k; ++j) A[r][j] -= f * A[c][j];
    }
  }
  w.assign(X.empty() ? 0 : X[0].size(), 0.0);
  for (std::size_t i = 0; i < k; ++i) w[active[i]] = A[i][k] / A[i][i];
  return true;
}

}  // namespace

std::vector<double> nnls(const std::vector<std::vector<double>>& X, const std::vector<double>& y) {
  const std::size_t n = X.empty() ? 0 : X[0].size();
  std::vector<double> best(n, 0.0);
  double best_err = std::numeric_limits<double>::infinity();
  // Columns have very different magnitudes (seconds, FLOPs, element counts): scale each to unit
  // norm so the elimination stays well conditioned.
  std::vector<double> scale(n, 1.0);
  for (std::size_t j = 0; j < n; ++j) {
    double s = 0;
    for (const auto& row : X) s += row[j] * row[j];
    scale[j] = s > 0 ? 1.0 / std::sqrt(s) : 1.0;
  }
  std::vector<std::vector<double>> Xs = X;
  for (auto& row : Xs)
    for (std::size_t j = 0; j < n; ++j) row[j] *= scale[j];
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<std::size_t> active;
    for (std::size_t j = 0; j < n; ++j)
      if (mask & (1u << j)) active.push_back(j);
    std::vector<double> w;
    if (!least_squares(Xs, y, active, w)) continue;
    if (std::any_of(w.begin(), w.end(), [](double v) { return v < 0; })) continue;
    double err = 0;
    for (std::size_t r = 0; r < Xs.size(); ++r) {
      double p = 0;
      for (std::size_t j = 0; j < n; ++j) p += Xs[r][j] * w[j];
      err += (p - y[r]) * (p - y[r]);
    }
    if (err < best_err) {
      best_err = err;
      best = w;
    }
  }
  for (std::size_t j = 0; j < n; ++j) best[j] *= scale[j];
  return best;
}

// ---- measuring --------------------------------------------------------------------------------

namespace {

// The median over the ranks that measured something (value >= 0) of a per-rank number.
double world_median(comm::Communicator& world, double value) {
  std::vector<double> all(static_cast<std::size_t>(world.size()));
  world.all_gather(&value, all.data(), 1);
  std::vector<double> valid;
  for (double v : all)
    if (v >= 0) valid.push_back(v);
  return median(std::move(valid));
}

// Seconds per call of f, timed over windows of at least `window` seconds (enough calls that a
// window spans several scheduler time slices: on a node whose ranks outnumber its cores a short
// timing would catch one rank running alone), median of `repeats` windows.
template <typename F>
double time_per_call(double window, int repeats, F&& f) {
  const auto t0 = Clock::now();
  f();
  const double once = std::max(seconds_since(t0), 1e-7);
  const int calls = std::clamp(static_cast<int>(std::ceil(window / once)), 1, 100000);
  return time_median(
             std::max(repeats, 1),
             [&] {
               for (int i = 0; i < calls; ++i) f();
             },
             false) /
         calls;
}

void fill_random(float* x, std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.uniform() - 0.5);
}

// One N x K -> O product of the backend's linear kernel, with its buffers.
class Gemm {
 public:
  Gemm(int n, int K, int O)
      : n_(n),
        K_(K),
        O_(O),
        in_(pool_, static_cast<std::size_t>(n) * K, "in"),
        w_(pool_, static_cast<std::size_t>(K) * O, "w"),
        b_(pool_, static_cast<std::size_t>(O), "b"),
        out_(pool_, static_cast<std::size_t>(n) * O, "out") {
    fill_random(in_.data(), in_.size(), 1);
    fill_random(w_.data(), w_.size(), 2);
    b_.zero();
  }
  void operator()() {
    cpu::linear_forward(out_.data(), in_.data(), w_.data(), b_.data(), n_, K_, O_,
                        cpu::WeightLayout::kInOut);
  }
  double flops() const { return 2.0 * n_ * K_ * O_; }

 private:
  int n_, K_, O_;
  MemoryPool pool_{"calibration"};
  Buffer<float> in_, w_, b_, out_;
};

// The yardstick of every compute measurement: a fixed GEMM (512 x 128 -> 384, an attention
// input projection of d_model 128 at 512 tokens).
Gemm probe_gemm() {
  return Gemm(512, 128, 384);
}

// Seconds per call of f relative to the probe's: windows of f and of the probe alternate and
// each pair gives one ratio, so background load that changes between pairs cancels; the
// median ratio over `repeats` pairs.
template <typename F>
double ratio_to_probe(Gemm& probe, double window, int repeats, F&& f) {
  // Calls per window from one untimed call of each (which also warms them up).
  auto calls_for = [window](auto& g) {
    const auto t0 = Clock::now();
    g();
    return std::clamp(static_cast<int>(std::ceil(window / std::max(seconds_since(t0), 1e-7))), 1,
                      100000);
  };
  const int nf = calls_for(f), np = calls_for(probe);
  auto per_call = [](auto& g, int calls) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) g();
    return seconds_since(t0) / calls;
  };
  std::vector<double> ratios;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const double tf = per_call(f, nf);
    ratios.push_back(tf / per_call(probe, np));
  }
  return median(std::move(ratios));
}

// Non-decreasing rate by size: pools adjacent violators (isotonic regression). A GEMM gets no
// slower per FLOP on a bigger product; a dip is noise.
void make_monotone(std::vector<std::pair<double, double>>& points) {
  std::sort(points.begin(), points.end());
  std::vector<std::pair<double, int>> blocks;  // (mean rate, points pooled)
  for (const auto& p : points) {
    blocks.emplace_back(p.second, 1);
    while (blocks.size() > 1 && blocks[blocks.size() - 2].first > blocks.back().first) {
      const auto [r, n] = blocks.back();
      blocks.pop_back();
      auto& prev = blocks.back();
      prev.first = (prev.first * prev.second + r * n) / (prev.second + n);
      prev.second += n;
    }
  }
  std::size_t i = 0;
  for (const auto& [rate, n] : blocks)
    for (int k = 0; k < n; ++k) points[i++].second = rate;
}

std::vector<std::pair<double, double>> measure_gemms(comm::Communicator& world, Gemm& probe,
                                                     double probe_s, const CalibrationOptions& o) {
  // Products of transformer linears from d_model 32 to 256 at 128 to 1024 tokens: d -> 3d
  // (attention input), d -> d, 4d -> d (MLP output).
  std::vector<std::array<int, 3>> shapes = {
      {256, 32, 96}, {256, 128, 128}, {512, 128, 384}, {512, 512, 128}, {512, 256, 768}};
  if (o.quick) shapes = {{128, 64, 128}, {512, 128, 384}, {1024, 128, 384}};
  std::vector<std::pair<double, double>> points;
  for (const auto& [n, K, O] : shapes) {
    Gemm g(n, K, O);
    const double ratio = world_median(world, ratio_to_probe(probe, o.window_s, o.repeats, g));
    points.emplace_back(g.flops(), g.flops() / (ratio * probe_s));
  }
  // A BLAS gets no slower on bigger products; a dip is a burst of background load.
  make_monotone(points);
  return points;
}

// Median relative error of X·w against y.
double median_error(const std::vector<std::vector<double>>& X, const std::vector<double>& y,
                    const std::vector<double>& w) {
  std::vector<double> errors;
  for (std::size_t i = 0; i < y.size(); ++i) {
    double p = 0;
    for (std::size_t j = 0; j < w.size(); ++j) p += w[j] * X[i][j];
    errors.push_back(std::abs(p - y[i]) / y[i]);
  }
  return median(errors);
}

// The compute fit, robust to a sample that a burst of background load slowed down: samples
// whose time/GEMM-time ratio strays from the median by more than 1.5x are left out, the rest
// are fitted for relative error (rows divided by their time), and the three-term fit is kept
// only if it beats one overall factor on the GEMM time (median relative error).
std::pair<std::vector<double>, double> robust_compute_fit(const std::vector<std::vector<double>>& X,
                                                          const std::vector<double>& y) {
  std::vector<double> ratios;
  for (std::size_t i = 0; i < y.size(); ++i) ratios.push_back(y[i] / X[i][0]);
  const double k = median(ratios);
  std::vector<std::vector<double>> Xk, Xw;
  std::vector<double> yk, ones;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (ratios[i] > 1.5 * k || ratios[i] < k / 1.5) continue;
    Xk.push_back(X[i]);
    yk.push_back(y[i]);
    std::vector<double> row = X[i];
    for (double& v : row) v /= y[i];
    Xw.push_back(std::move(row));
    ones.push_back(1.0);
  }
  const std::vector<double> single = {k, 0.0, 0.0};
  if (Xk.size() < 4) return {single, median_error(X, y, single)};
  const std::vector<double> w = nnls(Xw, ones);
  const double e3 = median_error(Xk, yk, w), e1 = median_error(Xk, yk, single);
  if (w[0] > 0 && e3 < e1) return {w, e3};
  return {single, e1};
}

// Sets the compute model of `cal` from the fit runs' features X and times y. With no run to fit
// (every model beyond the budget or the memory), the GEMM table alone prices compute, which the
// log says; with nothing to compare, the fit's error is recorded as 100 %.
void set_compute_fit(comm::Communicator& world, Calibration& cal,
                     const std::vector<std::vector<double>>& X, const std::vector<double>& y) {
  if (X.empty()) {
    if (world.rank() == 0)
      log::info("calibration: no model fit ran; compute is priced by the GEMM table alone");
    cal.gemm_scale = 1;
    cal.attn_s_per_flop = 0;
    cal.elem_s_per_unit = 0;
    cal.compute_fit_error = 1.0;
    return;
  }
  const auto [w, error] = robust_compute_fit(X, y);
  cal.gemm_scale = w[0];
  cal.attn_s_per_flop = w[1];
  cal.elem_s_per_unit = w[2];
  cal.compute_fit_error = error;
}

struct FitRun {
  Arch arch;
  int C, H, T, B;
};

void fit_compute(comm::Communicator& world, Calibration& cal, Gemm& probe, double probe_s,
                 const CalibrationOptions& o) {
  // Small one-block models whose attention and elementwise shares differ (T, d_model, arch).
  std::vector<FitRun> runs = {{Arch::kGpt2, 64, 2, 32, 8},
                              {Arch::kLlama, 128, 4, 128, 2},
                              {Arch::kGpt2, 192, 6, 32, 4},
                              {Arch::kLlama, 64, 2, 256, 1},
                              {Arch::kGpt2, 128, 4, 64, 4}};
  if (o.quick) runs.resize(4);
  std::vector<std::vector<double>> X;
  std::vector<double> y;
  for (const auto& r : runs) {
    ModelConfig m;
    m.arch = r.arch;
    m.n_layer = 1;
    m.n_head = r.H;
    m.d_model = r.C;
    m.d_ff = 0;
    m.max_seq_len = r.T;
    cpu::CpuDevice device("calibration", 0);
    double t = 0;
    {
      const auto model = make_model(device, m);
      model->init_weights(7);
      model->reserve(r.B, r.T);
      const std::size_t n = static_cast<std::size_t>(r.B) * r.T;
      Buffer<std::int32_t> tokens(device.memory(), n, "tokens"),
          targets(device.memory(), n, "tokens");
      Rng rng(3);
      for (std::size_t i = 0; i < n; ++i) {
        tokens[i] = static_cast<std::int32_t>(rng.below(256));
        targets[i] = static_cast<std::int32_t>(rng.below(256));
      }
      t = ratio_to_probe(probe, o.window_s, o.repeats, [&] {
        model->zero_grads();
        model->forward(tokens.data(), targets.data());
        model->backward(1.0f / static_cast<float>(n));
      });
    }
    const ComputeFeatures f = cal.features(m, r.B, r.T, 1);
    X.push_back({f.gemm_s, f.attn_flops, f.elem_units});
    y.push_back(world_median(world, t) * probe_s);
    log::debug(
        "calibration: {} d{} T{} B{}: {:.4f} s (GEMM table {:.4f} s, attention {:.3g}, "
        "elementwise {:.3g})",
        arch_name(r.arch), r.C, r.T, r.B, y.back(), f.gemm_s, f.attn_flops, f.elem_units);
  }
  set_compute_fit(world, cal, X, y);
}

void measure_optimizer_and_copies(comm::Communicator& world, Calibration& cal, Gemm& probe,
                                  double probe_s, const CalibrationOptions& o) {
  ModelConfig m;
  m.n_layer = 2;
  m.d_model = 128;
  m.n_head = 4;
  m.max_seq_len = 64;
  const ParameterLayout layout(m);
  cpu::CpuDevice cpu("calibration-device", 0);
  MemoryPool& device = cpu.memory();
  MemoryPool host("calibration-host");
  const std::size_t P = layout.total();
  Buffer<float> params(device, P, "parameters"), grads(device, P, "gradients");
  fill_random(params.data(), P, 4);
  fill_random(grads.data(), P, 5);
  AdamW opt(OptimizerConfig{}, layout, 0, P, cpu);
  std::int64_t step = 0;
  double sink = 0;
  const double t_opt = ratio_to_probe(probe, o.window_s, o.repeats, [&] {
    double s = 0;
    for (std::size_t i = 0; i < P; ++i) s += static_cast<double>(grads[i]) * grads[i];
    sink += s;
    opt.step(params.data(), nullptr, grads.data(), 1e-4, 1.0f, ++step);
    std::memset(static_cast<void*>(grads.data()), 0, grads.bytes());
    fill_random(grads.data(), 16, static_cast<std::uint64_t>(step));
  });
  if (!std::isfinite(sink)) throw Error("calibration: non-finite gradient norm");
  cal.optimizer_s_per_param = world_median(world, t_opt) * probe_s / static_cast<double>(P);

  const std::size_t bytes = std::size_t{4} << 20;
  Buffer<float> on_device(device, bytes / sizeof(float), "copy"),
      on_host(host, bytes / sizeof(float), "copy");
  fill_random(on_host.data(), on_host.size(), 6);
  const double t_copy = ratio_to_probe(probe, o.window_s, o.repeats, [&] {
    std::memcpy(on_device.data(), on_host.data(), bytes);
    std::memcpy(on_host.data(), on_device.data(), bytes);
  });
  cal.copy_bytes_per_s = 2.0 * static_cast<double>(bytes) / (world_median(world, t_copy) * probe_s);
}

// One collective of `bytes` (CommStats convention) on `group`.
void run_collective(comm::Communicator& group, CollOp op, std::size_t bytes, std::vector<float>& a,
                    std::vector<float>& b) {
  const std::size_t floats = std::max<std::size_t>(bytes / sizeof(float), 1);
  const auto g = static_cast<std::size_t>(group.size());
  switch (op) {
    case CollOp::kAllreduce:
      a.resize(floats, 1.0f);
      group.allreduce(a.data(), floats, comm::ReduceOp::kSum);
      break;
    case CollOp::kAllGather:
      a.resize(floats, 1.0f);
      b.resize(floats * g);
      group.all_gather(a.data(), b.data(), floats);
      break;
    case CollOp::kReduceScatter: {
      const std::size_t recv = std::max<std::size_t>(floats / g, 1);
      a.resize(recv * g, 1.0f);
      b.resize(recv);
      group.reduce_scatter(a.data(), b.data(), recv, comm::ReduceOp::kSum);
      break;
    }
    case CollOp::kSendRecv: {
      // Ping-pong between ranks 0 and 1 of the group; the caller halves the round trip.
      a.resize(floats, 1.0f);
      if (group.rank() == 0) {
        group.send(a.data(), floats, 1, 11);
        group.recv(a.data(), floats, 1, 12);
      } else if (group.rank() == 1) {
        group.recv(a.data(), floats, 0, 11);
        group.send(a.data(), floats, 0, 12);
      }
      break;
    }
  }
}

// *bound_used: whether the per-byte cost is the upper bound below, not the fit's.
LinkFit fit_link(const std::vector<double>& bytes, const std::vector<double>& times, int group,
                 bool inter, bool* bound_used) {
  std::vector<std::vector<double>> X;
  for (double b : bytes) X.push_back({1.0, b});
  std::vector<double> w = nnls(X, times);
  // Times that do not grow with the message size (the sizes all latency-bound, or noise on a
  // loaded machine) give no per-byte cost, and a cost model with free bytes would price any
  // message as latency alone. The largest message's time over its bytes, as if it paid no
  // latency, bounds the per-byte cost from above; the caller says that it was used.
  *bound_used = w[1] <= 0 && !bytes.empty();
  if (*bound_used) {
    const auto largest = std::max_element(bytes.begin(), bytes.end()) - bytes.begin();
    w[1] = times[largest] / std::max(bytes[largest], 1.0);
  }
  LinkFit f{group, inter, w[0], w[1], 0};
  std::vector<double> errors;
  for (std::size_t i = 0; i < bytes.size(); ++i)
    errors.push_back(std::abs(w[0] + w[1] * bytes[i] - times[i]) / std::max(times[i], 1e-12));
  f.fit_error = median(errors);
  return f;
}

// Times every collective of `sizes` on one group (`g`: its control communicator, null when
// this rank is in no group this time; run(op, bytes) runs one collective, complete on return)
// and appends one fit per op of size `group`. `work` is a few milliseconds of compute, for the
// synchronisation wait. Every rank of the world calls this.
template <typename Run, typename Work>
void measure_links_with(comm::Communicator& world, Calibration& cal, comm::Communicator* g,
                        int group, bool inter, const std::vector<std::size_t>& sizes,
                        const CalibrationOptions& o, Run&& run, Work&& work) {
  for (CollOp op :
       {CollOp::kAllreduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kSendRecv}) {
    std::vector<double> xs, ts;
    for (std::size_t s : sizes) {
      // All-gather counts the contribution: use a quarter so buffers stay comparable.
      const std::size_t bytes = op == CollOp::kAllGather ? s / 4 : s;
      double t = -1;
      if (g) {
        // Enough calls per timing to span scheduler slices; the group agrees on the count.
        g->barrier();
        const auto tw = Clock::now();
        run(op, bytes);  // also the warm-up (buffers, connections)
        double once = std::max(seconds_since(tw), 1e-7);
        g->allreduce(&once, 1, comm::ReduceOp::kMax);
        const int calls = std::clamp(static_cast<int>(std::ceil(o.window_s / 3 / once)), 1, 1000);
        std::vector<double> samples;
        for (int r = 0; r < o.repeats; ++r) {
          g->barrier();
          const auto t0 = Clock::now();
          for (int c = 0; c < calls; ++c) run(op, bytes);
          samples.push_back(seconds_since(t0) / calls);
        }
        t = median(samples);
        if (op == CollOp::kSendRecv) t *= 0.5;
        g->allreduce(&t, 1, comm::ReduceOp::kMax);
      }
      xs.push_back(static_cast<double>(bytes));
      ts.push_back(world_median(world, t));
    }
    log::debug("calibration: {} on {} ranks: {}", coll_op_name(op), group, [&] {
      std::string text;
      for (std::size_t i = 0; i < xs.size(); ++i)
        text += fmt::format("{}{:.0f} B {:.3g} s", i ? ", " : "", xs[i], ts[i]);
      return text;
    }());
    bool bound_used = false;
    const LinkFit fit = fit_link(xs, ts, group, inter, &bound_used);
    if (bound_used && world.rank() == 0)
      log::warn(
          "calibration: {} on {} ranks: the times did not grow with the message size (noise, or "
          "every size latency-bound); its per-byte cost is the largest message's time over its "
          "bytes, an upper bound",
          coll_op_name(op), group);
    cal.links[coll_op_name(op)].push_back(fit);
  }
  // Synchronisation: in a training step ranks reach a collective at different times (their
  // compute jitters, and on an oversubscribed node a partner may be descheduled), and the
  // early ones wait. Measured as the mean time inside a tiny allreduce that follows a few
  // milliseconds of compute, minus its latency.
  double sync = -1;
  if (g) {
    work();
    run(CollOp::kAllreduce, sizeof(float));
    const int calls = o.quick ? 4 : 12;
    double inside = 0;
    g->barrier();
    for (int c = 0; c < calls; ++c) {
      work();
      const auto t0 = Clock::now();
      run(CollOp::kAllreduce, sizeof(float));
      inside += seconds_since(t0);
    }
    sync = inside / calls;
    g->allreduce(&sync, 1, comm::ReduceOp::kSum);
    sync /= g->size();
  }
  const double waited = world_median(world, sync);
  const double alpha = cal.links[coll_op_name(CollOp::kAllreduce)].back().alpha_s;
  cal.links[coll_op_name(CollOp::kAllreduce)].back().sync_s = std::max(waited - alpha, 0.0);
}

// Measures every collective on the groups `color` forms (every rank of the world calls this;
// color < 0: not in a group this time) and appends one fit per op of size `group`.
void measure_links(comm::Communicator& world, Calibration& cal, int color, int group, bool inter,
                   const CalibrationOptions& o) {
  std::unique_ptr<comm::Communicator> g = world.split(color, world.rank());
  const std::vector<std::size_t> sizes = o.quick ? std::vector<std::size_t>{4096, 131072}
                                                 : std::vector<std::size_t>{4096, 131072, 1048576};
  std::vector<float> a, b;
  Gemm work(256, 128, 128);
  measure_links_with(
      world, cal, g.get(), group, inter, sizes, o,
      [&](CollOp op, std::size_t bytes) { run_collective(*g, op, bytes, a, b); }, [&] { work(); });
}

// ---- on a GPU ---------------------------------------------------------------------------------

double gemm_flops(const GemmShape& s) {
  return 2.0 * s[0] * s[1] * s[2];
}

// Device seconds per call of f (the device's timer), median of `repeats` windows of at least
// `window` seconds each, after two untimed calls (the first also picks the GEMM algorithm).
template <typename F>
double device_time_per_call(DeviceTimer& timer, double window, int repeats, F&& f) {
  double once = 0;
  for (int w = 0; w < 2; ++w) {
    timer.start();
    f();
    timer.stop();
    once = std::max(timer.seconds(), 1e-7);
  }
  const int calls = std::clamp(static_cast<int>(std::ceil(window / once)), 1, 100000);
  std::vector<double> samples;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    timer.start();
    for (int i = 0; i < calls; ++i) f();
    timer.stop();
    samples.push_back(timer.seconds() / calls);
  }
  return median(std::move(samples));
}

// Wall seconds device_time_per_call takes for a call of `seconds` (for the budget).
double predicted_wall(double seconds, const CalibrationOptions& o) {
  return 2 * seconds + std::max(o.repeats, 1) * std::max(seconds, o.window_s);
}

// Random bf16 values uploaded to `n` elements of device memory.
void upload_random_bf16(Device& device, BFloat16* dst, std::size_t n, std::uint64_t seed) {
  std::vector<BFloat16> host(n);
  Rng rng(seed);
  for (auto& v : host) v = to_bfloat16(static_cast<float>(rng.uniform() - 0.5));
  device.upload(dst, host.data(), n * sizeof(BFloat16));
}

// The wall-clock budget of a GPU calibration's GEMMs and model fit: a few seconds when quick.
double gpu_budget(const CalibrationOptions& o) {
  return o.quick ? std::min(o.gpu_budget_s, 4.0) : o.gpu_budget_s;
}

// Runs `measure` (local work that allocates on the device, no collectives) and tells whether
// every rank's pool had room for it: a run's --device-memory caps calibration too (ranks that
// share a GPU share its memory), so a measurement that does not fit is skipped on every rank
// rather than failing the run.
template <typename F>
bool fits_on_every_rank(comm::Communicator& world, F&& measure) {
  double ok = 1;
  try {
    measure();
  } catch (const OutOfMemoryError&) {
    ok = 0;
  }
  world.allreduce(&ok, 1, comm::ReduceOp::kMin);
  return ok == 1;
}

// One bf16 GEMM through the backend's own linear op (CudaProvider::linear_forward).
class DeviceGemm {
 public:
  DeviceGemm(Device& device, const GemmShape& s)
      : device_(device),
        shape_(s),
        in_(device.memory(), static_cast<std::size_t>(s[0]) * static_cast<std::size_t>(s[1]),
            "calibration GEMM input"),
        w_(device.memory(), static_cast<std::size_t>(s[1]) * static_cast<std::size_t>(s[2]),
           "calibration GEMM weight"),
        out_(device.memory(), static_cast<std::size_t>(s[0]) * static_cast<std::size_t>(s[2]),
             "calibration GEMM output") {
    upload_random_bf16(device, in_.data(), in_.size(), 1);
    upload_random_bf16(device, w_.data(), w_.size(), 2);
  }
  void operator()() {
    cuda_provider().linear_forward(device_, out_.data(), in_.data(), w_.data(), shape_[0],
                                   shape_[1], shape_[2]);
  }

 private:
  Device& device_;
  GemmShape shape_;
  Buffer<BFloat16> in_, w_, out_;
};

// The rate table from the measured shapes.
void rebuild_gemm_rate(Calibration& cal) {
  std::vector<std::pair<double, double>> points;
  for (const auto& g : cal.gemm_shapes)
    points.emplace_back(gemm_flops(g.shape), gemm_flops(g.shape) / g.seconds);
  make_monotone(points);
  cal.gemm_rate = std::move(points);
}

// Shapes of `wanted` not yet in cal, smallest first, timed while the budget (from `start`)
// lasts; every rank runs the same sequence. Returns how many were added.
int measure_device_gemms(comm::Communicator& world, Calibration& cal, Device& device,
                         std::vector<GemmShape> wanted, const CalibrationOptions& o,
                         Clock::time_point start, double budget_s) {
  std::sort(wanted.begin(), wanted.end(), [](const GemmShape& a, const GemmShape& b) {
    return gemm_flops(a) != gemm_flops(b) ? gemm_flops(a) < gemm_flops(b) : a < b;
  });
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  const auto timer = device.timer();
  int added = 0;
  std::vector<GemmShape> skipped, too_big;
  for (const GemmShape& s : wanted) {
    if (s[0] <= 0 || s[1] <= 0 || s[2] <= 0 || cal.has_gemm_shape(s)) continue;
    // Predicted from the fastest rate measured so far (rates grow with size: an upper bound
    // on the time); the first shape is always measured.
    double predicted = 0;
    if (!cal.gemm_rate.empty())
      predicted = predicted_wall(gemm_flops(s) / cal.gemm_rate.back().second, o);
    double finish = seconds_since(start) + predicted;
    world.allreduce(&finish, 1, comm::ReduceOp::kMax);
    if (!cal.gemm_shapes.empty() && finish > budget_s) {
      skipped.push_back(s);
      continue;
    }
    double t = 0;
    if (!fits_on_every_rank(world, [&] {
          DeviceGemm gemm(device, s);
          t = device_time_per_call(*timer, o.window_s, o.repeats, gemm);
        })) {
      too_big.push_back(s);
      continue;
    }
    cal.gemm_shapes.push_back(GemmShapeTime{s, world_median(world, t)});
    rebuild_gemm_rate(cal);
    ++added;
  }
  if (!skipped.empty() && world.rank() == 0)
    log::info(
        "calibration: {} GEMM shape(s) not timed, the largest {}x{}x{}: beyond the {:.0f} s "
        "budget at the rates measured; their times are interpolated from the measured rates",
        skipped.size(), skipped.back()[0], skipped.back()[1], skipped.back()[2], budget_s);
  if (!too_big.empty() && world.rank() == 0)
    log::info(
        "calibration: {} GEMM shape(s) not timed, the largest {}x{}x{}: their operands do not fit "
        "the device memory given; their times are interpolated from the measured rates",
        too_big.size(), too_big.back()[0], too_big.back()[1], too_big.back()[2]);
  return added;
}

// A size sweep of square-ish products, from launch-bound to compute-bound on a GPU (the
// budget cuts the large end on the emulator).
std::vector<GemmShape> sweep_shapes(bool quick) {
  std::vector<GemmShape> out;
  for (int s : {64, 256, 1024, 2048, 4096}) {
    if (quick && s > 1024) break;
    out.push_back({2 * s, s, s});
  }
  return out;
}

std::vector<FitRun> fit_runs(bool quick) {
  std::vector<FitRun> runs = {{Arch::kGpt2, 64, 2, 32, 8},
                              {Arch::kLlama, 128, 4, 128, 2},
                              {Arch::kGpt2, 192, 6, 32, 4},
                              {Arch::kLlama, 64, 2, 256, 1},
                              {Arch::kGpt2, 128, 4, 64, 4}};
  if (quick) runs.resize(4);
  return runs;
}

ModelConfig fit_model(const FitRun& r) {
  ModelConfig m;
  m.arch = r.arch;
  m.n_layer = 1;
  m.n_head = r.H;
  m.d_model = r.C;
  m.d_ff = 0;
  m.max_seq_len = r.T;
  return m;
}

// The compute fit of fit_compute, on the device: one-block models forward and backward, timed
// with the device's timer.
void fit_compute_on_device(comm::Communicator& world, Calibration& cal, Device& device,
                           const CalibrationOptions& o, Clock::time_point start) {
  std::vector<std::vector<double>> X;
  std::vector<double> y;
  const auto timer = device.timer();
  for (const auto& r : fit_runs(o.quick)) {
    const ModelConfig m = fit_model(r);
    const ComputeFeatures f = cal.features(m, r.B, r.T, 1);
    // A whole pass takes a few times its GEMMs; all ranks agree whether it fits the budget.
    double finish = seconds_since(start) + predicted_wall(4 * f.gemm_s, o);
    world.allreduce(&finish, 1, comm::ReduceOp::kMax);
    if (finish > gpu_budget(o) && X.size() >= 1) {
      if (world.rank() == 0)
        log::info("calibration: model fit {} d{} T{} B{} not run (beyond the {:.0f} s budget)",
                  arch_name(r.arch), r.C, r.T, r.B, gpu_budget(o));
      continue;
    }
    double t = 0;
    const bool fits = fits_on_every_rank(world, [&] {
      const auto model = make_model(device, m);
      model->init_weights(7);
      model->reserve(r.B, r.T);
      const std::size_t n = static_cast<std::size_t>(r.B) * r.T;
      std::vector<std::int32_t> host(2 * n);
      Rng rng(3);
      for (auto& v : host) v = static_cast<std::int32_t>(rng.below(256));
      Buffer<std::int32_t> tokens(device.memory(), 2 * n, "calibration tokens");
      device.upload(tokens.data(), host.data(), 2 * n * sizeof(std::int32_t));
      t = device_time_per_call(*timer, o.window_s, o.repeats, [&] {
        model->zero_grads();
        model->forward(tokens.data(), tokens.data() + n);
        model->backward(1.0f / static_cast<float>(n));
      });
    });
    if (!fits) {
      if (world.rank() == 0)
        log::info(
            "calibration: model fit {} d{} T{} B{} not run (does not fit the device memory "
            "given)",
            arch_name(r.arch), r.C, r.T, r.B);
      continue;
    }
    X.push_back({f.gemm_s, f.attn_flops, f.elem_units});
    y.push_back(world_median(world, t));
    log::debug("calibration (device): {} d{} T{} B{}: {:.3g} s (GEMM table {:.3g} s)",
               arch_name(r.arch), r.C, r.T, r.B, y.back(), f.gemm_s);
  }
  set_compute_fit(world, cal, X, y);
}

// AdamW, the gradient norm and zeroing per parameter, on device buffers; the parameter count
// grows until one call takes a measurable share of the window (bounded: 16 Mi parameters).
void measure_device_optimizer(comm::Communicator& world, Calibration& cal, Device& device,
                              const CalibrationOptions& o) {
  const auto timer = device.timer();
  std::size_t P = std::size_t{1} << 16;
  double per_param = 0;
  for (;;) {
    double once = 0;
    const bool fits = fits_on_every_rank(world, [&] {
      Buffer<float> master(device.memory(), P, "calibration master"),
          grad(device.memory(), P, "calibration gradients"), m(device.memory(), P, "calibration m"),
          v(device.memory(), P, "calibration v");
      Buffer<BFloat16> weights(device.memory(), P, "calibration weights");
      for (Buffer<float>* b : {&master, &grad, &m, &v}) device.zero(b->data(), b->bytes());
      int step = 0;
      double sink = 0;
      const auto update = [&] {
        sink += device.sum_of_squares(grad.data(), P);
        AdamWStep s;
        s.lr = 1e-4f;
        s.step = ++step;
        device.adamw_update(master.data(), weights.data(), grad.data(), m.data(), v.data(), P, s,
                            1.0f);
        device.zero(grad.data(), grad.bytes());
      };
      timer->start();
      update();
      timer->stop();
      once = timer->seconds();
      per_param =
          device_time_per_call(*timer, o.window_s, o.repeats, update) / static_cast<double>(P);
      if (!std::isfinite(sink)) throw Error("calibration: non-finite gradient norm on the device");
    });
    if (!fits) {
      if (per_param == 0)
        throw Error(
            fmt::format("calibration: {} parameters of optimizer state do not fit the "
                        "device memory given ({})",
                        P, format_bytes(device.memory().capacity())));
      break;  // the last size that fitted stands
    }
    // Agreed by every rank: the same number of collective medians below.
    double grow = once < o.window_s / 8 && P < (std::size_t{1} << 24) ? 1.0 : 0.0;
    world.allreduce(&grow, 1, comm::ReduceOp::kMin);
    if (grow == 0) break;
    P *= 4;
  }
  cal.optimizer_s_per_param = world_median(world, per_param);
}

// Host<->device copy bandwidth: upload and download of one buffer, growing it until a copy
// takes a measurable share of the window (bounded: 256 MiB). The host side is what offload's
// state uses (Device::host_allocator(): page-locked on CUDA, copied on the copy stream); where
// the device has none (the CPU) it is plain host memory and the copies are synchronous.
void measure_device_copies(comm::Communicator& world, Calibration& cal, Device& device,
                           const CalibrationOptions& o) {
  BackingAllocator* const pinned = device.host_allocator();
  std::size_t bytes = std::size_t{1} << 20;
  double rate = 0;
  for (;;) {
    double once = 0;
    const bool fits = fits_on_every_rank(world, [&] {
      MemoryPool host_pool("calibration host staging", 0, pinned);
      Buffer<std::byte> on_device(device.memory(), bytes, "calibration copy");
      Buffer<std::byte> on_host(host_pool, bytes, "calibration copy (host)");
      std::fill(on_host.data(), on_host.data() + bytes, std::byte{1});
      const auto round_trip = [&] {
        const auto t0 = Clock::now();
        if (pinned != nullptr) {
          device.upload_async(on_device.data(), on_host.data(), bytes);
          device.download_async(on_host.data(), on_device.data(), bytes);
          device.finish_copies("copy-bandwidth calibration");
        } else {
          device.upload(on_device.data(), on_host.data(), bytes);
          device.download(on_host.data(), on_device.data(), bytes);
        }
        return seconds_since(t0);
      };
      round_trip();  // first touch of both sides
      once = round_trip();
      std::vector<double> samples;
      const int calls =
          std::clamp(static_cast<int>(std::ceil(o.window_s / std::max(once, 1e-7))), 1, 1000);
      for (int r = 0; r < std::max(o.repeats, 1); ++r) {
        double t = 0;
        for (int c = 0; c < calls; ++c) t += round_trip();
        samples.push_back(t / calls);
      }
      rate = 2.0 * static_cast<double>(bytes) / median(std::move(samples));
    });
    if (!fits) {
      if (rate == 0)
        throw Error(
            fmt::format("calibration: a {} copy buffer does not fit the device memory "
                        "given ({})",
                        format_bytes(bytes), format_bytes(device.memory().capacity())));
      break;  // the last size that fitted stands
    }
    double grow = once < o.window_s / 8 && bytes < (std::size_t{256} << 20) ? 1.0 : 0.0;
    world.allreduce(&grow, 1, comm::ReduceOp::kMin);
    if (grow == 0) break;
    bytes *= 4;
  }
  cal.copy_bytes_per_s = world_median(world, rate);
  cal.copy_pinned = pinned != nullptr;
}

// One collective of `bytes` on device buffers over the data communicator, complete on return.
void run_device_collective(comm::CommPair& pair, Device& device, CollOp op, std::size_t bytes,
                           float* a, float* b) {
  comm::Communicator& data = pair.data();
  const std::size_t floats = std::max<std::size_t>(bytes / sizeof(float), 1);
  const auto g = static_cast<std::size_t>(data.size());
  switch (op) {
    case CollOp::kAllreduce:
      data.allreduce(a, floats, comm::ReduceOp::kSum);
      break;
    case CollOp::kAllGather:
      data.all_gather(a, b, floats);
      break;
    case CollOp::kReduceScatter:
      data.reduce_scatter(a, b, std::max<std::size_t>(floats / g, 1), comm::ReduceOp::kSum);
      break;
    case CollOp::kSendRecv:
      if (data.rank() == 0) {
        data.send(a, floats, 1, 11);
        data.recv(a, floats, 1, 12);
      } else if (data.rank() == 1) {
        data.recv(a, floats, 0, 11);
        data.send(a, floats, 0, 12);
      }
      break;
  }
  device.synchronize("calibration collective");
}

// measure_links over the data communicator of each group, on device buffers.
void measure_device_links(comm::Communicator& world, Calibration& cal, Device& device, int color,
                          int group, bool inter, const CalibrationOptions& o) {
  std::unique_ptr<comm::Communicator> g = world.split(color, world.rank());
  const std::vector<std::size_t> sizes =
      o.quick ? std::vector<std::size_t>{4096, 131072, 4194304}
              : std::vector<std::size_t>{4096, 131072, 1048576, 8388608};
  std::unique_ptr<comm::CommPair> pair;
  Buffer<float> a, b;
  if (g) {
    pair = comm::make_comm_pair(*g, device);
    // The largest of any op: a reduce-scatter's whole buffer, an all-gather's g contributions.
    const std::size_t floats = sizes.back() / sizeof(float) * static_cast<std::size_t>(group);
    a = Buffer<float>(device.memory(), floats, "calibration collective");
    b = Buffer<float>(device.memory(), floats, "calibration collective");
    device.zero(a.data(), a.bytes());
    device.zero(b.data(), b.bytes());
  }
  DeviceGemm work(device, {256, 256, 256});
  measure_links_with(
      world, cal, g.get(), group, inter, sizes, o,
      [&](CollOp op, std::size_t bytes) {
        run_device_collective(*pair, device, op, bytes, a.data(), b.data());
      },
      [&] {
        for (int i = 0; i < 4; ++i) work();
        device.synchronize("calibration work");
      });
}

// The intra-node group sizes calibrate() measures and this rank's color for each.
std::vector<std::pair<int, int>> link_groups(comm::Communicator& world, const Hardware& hardware,
                                             const std::vector<int>& node_of_rank, int* local_out) {
  const int rank = world.rank();
  const int node = node_of_rank.at(static_cast<std::size_t>(rank));
  int local = 0;
  for (int r = 0; r < rank; ++r)
    if (node_of_rank[static_cast<std::size_t>(r)] == node) ++local;
  const int smallest =
      *std::min_element(hardware.ranks_per_node.begin(), hardware.ranks_per_node.end());
  std::vector<int> groups;
  for (int gsz = 2; gsz <= smallest; gsz *= 2) groups.push_back(gsz);
  if (smallest > 1 && (groups.empty() || groups.back() != smallest)) groups.push_back(smallest);
  std::vector<std::pair<int, int>> out;  // (group size, color)
  for (int gsz : groups) {
    const int per_node = hardware.ranks_per_node[static_cast<std::size_t>(node)] / gsz;
    out.emplace_back(gsz, local / gsz < per_node ? node * 100000 + local / gsz : -1);
  }
  if (local_out) *local_out = local;
  return out;
}

std::unique_ptr<Device> calibration_device(comm::Communicator& world, const CalibrationOptions& o) {
  return make_device(DeviceKind::kCuda, o.device_index >= 0 ? o.device_index : world.rank(),
                     o.device_capacity);
}

// calibrate() on each rank's GPU.
Calibration calibrate_device(comm::Communicator& world, const Hardware& hardware,
                             const std::vector<int>& node_of_rank, const CalibrationOptions& o) {
  const auto t0 = Clock::now();
  Calibration cal;
  cal.hardware_id = hardware.id();
  cal.created_utc = utc_now();
  cal.quick = o.quick;
  cal.device = hardware.device_kind;
  // A GPU is not time-shared with other ranks' CPU work: no probe, no load factor.
  cal.probe_flops_per_s = 0;
  std::unique_ptr<Device> device;
  comm::agree_on(world, [&] { device = calibration_device(world, o); });
  cal.timer = device->timer()->clock();
  world.barrier();
  // GEMMs: a size sweep, the fit models' shapes, the jobs' shapes; within the budget.
  std::vector<GemmShape> shapes = sweep_shapes(o.quick);
  for (const auto& r : fit_runs(o.quick))
    for (const auto& s : model_gemm_shapes(fit_model(r), r.B, r.T, 1)) shapes.push_back(s);
  shapes.insert(shapes.end(), o.gemm_shapes.begin(), o.gemm_shapes.end());
  // Half the budget for GEMMs, the rest for the model fit (which needs several runs).
  measure_device_gemms(world, cal, *device, shapes, o, t0, gpu_budget(o) / 2);
  log::debug("calibration (device): {} GEMM shapes {:.2f} s", cal.gemm_shapes.size(),
             seconds_since(t0));
  fit_compute_on_device(world, cal, *device, o, t0);
  log::debug("calibration (device): model fit {:.2f} s", seconds_since(t0));
  measure_device_optimizer(world, cal, *device, o);
  measure_device_copies(world, cal, *device, o);
  if (world.rank() == 0)
    log::info("calibration: host<->device copies {:.2f} GB/s ({} host memory)",
              cal.copy_bytes_per_s / 1e9,
              cal.copy_pinned ? "page-locked, on the copy stream" : "plain");
  log::debug("calibration (device): optimizer, copies {:.2f} s", seconds_since(t0));
  int local = 0;
  for (const auto& [gsz, color] : link_groups(world, hardware, node_of_rank, &local)) {
    measure_device_links(world, cal, *device, color, gsz, false, o);
    log::debug("calibration (device): collectives on {} ranks {:.2f} s", gsz, seconds_since(t0));
  }
  if (hardware.nodes() > 1) {
    const int smallest =
        *std::min_element(hardware.ranks_per_node.begin(), hardware.ranks_per_node.end());
    measure_device_links(world, cal, *device, local < smallest ? local : -1, hardware.nodes(), true,
                         o);
  }
  // Overlap of communication with compute is a strategy's (NCCL streams); not measured yet.
  cal.overlap = 0.0;
  cal.seconds = seconds_since(t0);
  std::string text = cal.to_json().dump();
  broadcast_text(world, text, 0);
  return Calibration::from_json(nlohmann::json::parse(text));
}

}  // namespace

double probe_speed(comm::Communicator& world, double window_s) {
  Gemm probe = probe_gemm();
  world.barrier();
  return probe.flops() / world_median(world, time_per_call(window_s, 3, probe));
}

int add_gemm_shapes(comm::Communicator& world, Calibration& cal,
                    const std::vector<GemmShape>& shapes, const CalibrationOptions& options) {
  if (options.device != DeviceKind::kCuda)
    throw Error("add_gemm_shapes: GEMM shapes are timed on a GPU calibration only");
  const auto t0 = Clock::now();
  std::unique_ptr<Device> device;
  comm::agree_on(world, [&] { device = calibration_device(world, options); });
  const int added =
      measure_device_gemms(world, cal, *device, shapes, options, t0, gpu_budget(options));
  // Rank 0's numbers everywhere (the medians agree already).
  std::string text = cal.to_json().dump();
  broadcast_text(world, text, 0);
  cal = Calibration::from_json(nlohmann::json::parse(text));
  return added;
}

Calibration calibrate(comm::Communicator& world, const Hardware& hardware,
                      const std::vector<int>& node_of_rank, const CalibrationOptions& options) {
  if (options.device == DeviceKind::kCuda)
    return calibrate_device(world, hardware, node_of_rank, options);
  const auto t0 = Clock::now();
  Calibration cal;
  cal.hardware_id = hardware.id();
  cal.created_utc = utc_now();
  cal.quick = options.quick;
  world.barrier();
  // Compute is measured against the probe GEMM (see ratio_to_probe) and converted to seconds
  // at the probe's speed now.
  cal.probe_flops_per_s = probe_speed(world, options.window_s);
  Gemm probe = probe_gemm();
  const double probe_s = probe.flops() / cal.probe_flops_per_s;
  log::debug("calibration: probe {:.2f} s", seconds_since(t0));
  cal.gemm_rate = measure_gemms(world, probe, probe_s, options);
  log::debug("calibration: gemms {:.2f} s", seconds_since(t0));
  fit_compute(world, cal, probe, probe_s, options);
  log::debug("calibration: model fit {:.2f} s", seconds_since(t0));
  measure_optimizer_and_copies(world, cal, probe, probe_s, options);
  log::debug("calibration: optimizer, copies {:.2f} s", seconds_since(t0));

  // Collectives inside a node, on every group size up to the smallest node's rank count
  // (powers of two, and that count itself), all groups busy at once.
  int local = 0;
  for (const auto& [gsz, color] : link_groups(world, hardware, node_of_rank, &local)) {
    measure_links(world, cal, color, gsz, false, options);
    log::debug("calibration: collectives on {} ranks {:.2f} s", gsz, seconds_since(t0));
  }
  // Across nodes: one rank of each node (same local index) per group.
  if (hardware.nodes() > 1) {
    const int smallest =
        *std::min_element(hardware.ranks_per_node.begin(), hardware.ranks_per_node.end());
    const int color = local < smallest ? local : -1;
    measure_links(world, cal, color, hardware.nodes(), true, options);
  }
  cal.overlap = 0.0;
  cal.seconds = seconds_since(t0);
  // Every rank must hold identical numbers: rank 0's (the medians already agree; timestamps and
  // the duration may not).
  std::string text = cal.to_json().dump();
  broadcast_text(world, text, 0);
  return Calibration::from_json(nlohmann::json::parse(text));
}

}  // namespace saturn::profile
