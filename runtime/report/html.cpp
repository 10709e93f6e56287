// `saturn report`: one self-contained HTML page (inline CSS and SVG; no script, nothing
// fetched) that shows what a run did: devices over time (planned beside actual), loss curves,
// the jobs, the totals. Hover titles (<title>) carry the details without JavaScript.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "runtime/report/run_data.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::report {
namespace {

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&#39;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

// Distinct colours for the first ten jobs (Tableau 10), then hues spread by the golden angle.
std::string job_color(std::size_t k) {
  static const char* kPalette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2",
                                   "#edc948", "#ff9da7", "#9c755f", "#e15759", "#bab0ac"};
  if (k < 10) return kPalette[k];
  return fmt::format("hsl({:.0f},55%,50%)", std::fmod(static_cast<double>(k) * 137.508, 360.0));
}

std::string num(double v) {
  return fmt::format("{:.1f}", v);
}

std::string loss_text(double v) {
  return std::isfinite(v) ? fmt::format("{:.4f}", v) : "-";
}

// A tick step for [0, span] giving at most ~`max_ticks` ticks, in round seconds/minutes/hours.
double tick_step(double span, int max_ticks) {
  static const double kSteps[] = {0.1,  0.2,   0.5,   1,     2,     5,      10,    15,
                                  30,   60,    120,   300,   600,   900,    1800,  3600,
                                  7200, 10800, 21600, 43200, 86400, 172800, 604800};
  for (double s : kSteps)
    if (span / s <= max_ticks) return s;
  return span / max_ticks;
}

// A round step for a value axis (1, 2, 5 x 10^k).
double nice_step(double span, int max_ticks) {
  if (!(span > 0)) return 1;
  const double raw = span / max_ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

// Axis labels: "45s" under a minute's span, "12:30" under an hour's, "2:05:00" beyond.
std::string tick_label(double t, double span) {
  if (span < 60) return fmt::format("{:g}s", std::round(t * 10) / 10);
  const long long s = std::llround(t);
  if (span < 3600) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

std::string segment_text(const Segment& s) {
  return fmt::format("{}&#215;{}", esc(s.strategy), s.ranks.size());
}

std::string describe_segment(const JobInfo& j, std::size_t k, const Segment& s) {
  std::string t =
      fmt::format("{} segment {}: {} x{} on ranks", j.id, k, s.strategy, s.ranks.size());
  for (int r : s.ranks) t += fmt::format(" {}", r);
  if (!s.knobs.empty()) {
    t += " [";
    for (std::size_t i = 0; i < s.knobs.size(); ++i) t += (i ? " " : "") + s.knobs[i];
    t += "]";
  }
  t += fmt::format("\nsteps {} to {}, {} to {} ({})\n", s.start_step, s.end_step,
                   format_seconds(s.start_s), format_seconds(s.end_s),
                   format_seconds(s.end_s - s.start_s));
  t += "ended: " + s.end + (s.reason.empty() ? "" : " (" + s.reason + ")");
  return t;
}

const char* kStyle = R"CSS(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
  color:#1d2330;background:#f6f7f9;margin:0}
main{max-width:1280px;margin:0 auto;padding:20px 24px 40px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px}
.sub{color:#5a6372;margin:0 0 16px}
.state{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;font-size:13px}
.state.ok{background:#dff3e4;color:#1e6b34}.state.warn{background:#fdf0d5;color:#8a5a00}
.state.bad{background:#fbe0e0;color:#9b1c1c}.state.live{background:#dde9fb;color:#1d4f91}
#totals{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:10px}
.card{background:#fff;border:1px solid #e2e5ea;border-radius:8px;padding:10px 14px}
.card .k{color:#5a6372;font-size:12px;text-transform:uppercase;letter-spacing:.04em}
.card .v{font-size:20px;font-weight:600;margin-top:2px;overflow-wrap:anywhere}
.card .v.long{font-size:15px}
.card .n{color:#5a6372;font-size:12px}
.panel{background:#fff;border:1px solid #e2e5ea;border-radius:8px;padding:10px;overflow-x:auto}
svg text{font-family:inherit}
.axis text,.lane-label{font-size:11px;fill:#5a6372}
.grid{stroke:#e8eaee;stroke-width:1}
.bar.planned{fill-opacity:.35;stroke-dasharray:3 2;stroke-width:1}
.bar.actual{stroke:#fff;stroke-width:.6}
.bar.actual.lost{fill-opacity:.45}
.bar.actual.running{fill-opacity:.75}
.bar-label{font-size:10px;fill:#fff;font-weight:600;pointer-events:none}
.marker{stroke-width:1.2;stroke-dasharray:4 3}
.marker.replan{stroke:#d97706}.marker.resume{stroke:#2563eb}.marker.signal{stroke:#6b7280}
.marker.failure{stroke:#b91c1c}.marker.now{stroke:#059669;stroke-dasharray:none}
.marker-label{font-size:10.5px}
.marker-label.replan{fill:#b45309}.marker-label.resume{fill:#1d4ed8}
.marker-label.signal{fill:#4b5563}.marker-label.failure{fill:#991b1b}.marker-label.now{fill:#047857}
.fail-mark{stroke:#b91c1c;stroke-width:2.2}
.bar.actual.ended-selection,.bar.actual.ended-early_stop{fill-opacity:.55;stroke:#8a5a00;stroke-width:1.2;stroke-dasharray:3 2}
.bar.actual.ended-cancel{fill-opacity:.3;stroke:#4b5563;stroke-width:1.2;stroke-dasharray:2 2}
.stop-mark{fill:#8a5a00;stroke:#fff;stroke-width:.8}.stop-mark.cancel{fill:#4b5563}
.stop-label{font-size:10px;fill:#8a5a00;font-weight:600;paint-order:stroke;stroke:#fff;stroke-width:3px}.stop-label.cancel{fill:#4b5563}
.rung-mark{stroke:#7c3aed;stroke-width:1;stroke-dasharray:5 3}
.rung-label{font-size:10px;fill:#6d28d9}
.curve-end{stroke:#fff;stroke-width:.8}
.curves{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.curve{fill:none;stroke-width:1.4;stroke-opacity:.8;stroke-linejoin:round}
.curve.best{stroke-width:3.2;stroke-opacity:1}
.point{stroke:#fff;stroke-width:.8}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:8px 4px 0;font-size:13px}
.sw{display:inline-block;width:12px;height:12px;border-radius:3px;vertical-align:-1px;margin-right:5px}
.key{display:inline-block;width:22px;height:10px;vertical-align:0;margin-right:5px;border-radius:2px}
table{border-collapse:collapse;width:100%;background:#fff;border:1px solid #e2e5ea;font-size:13px}
th,td{padding:5px 8px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600;white-space:nowrap}
td.r,td.id{white-space:nowrap}
td.r,th.r{text-align:right;font-variant-numeric:tabular-nums}
tr.best td{background:#fff8e1}
.st-finished{color:#1e6b34}.st-failed{color:#9b1c1c;font-weight:600}.st-running{color:#1d4f91}
.st-stopped,.st-interrupted,.st-pending{color:#8a5a00}
.why{color:#5a6372;font-size:12px}
footer{margin-top:28px;color:#8a93a3;font-size:12px}
)CSS";

struct Card {
  std::string key, value, note;
};

std::string state_badge(const RunData& run) {
  if (!run.started) return R"(<span class="state live">starting: profiling and planning</span>)";
  if (run.ended) {
    if (run.exit_code == 0) return R"(<span class="state ok">finished</span>)";
    if (run.exit_code == 99)
      return R"(<span class="state warn">stopped with work left (exit 99): saturn run --resume continues it</span>)";
    return fmt::format(R"(<span class="state bad">ended with failed jobs (exit {})</span>)",
                       run.exit_code);
  }
  if (run.seconds_since_update > 300)
    return fmt::format(
        R"(<span class="state warn">not ended; no file changed for {} (killed?)</span>)",
        format_seconds(run.seconds_since_update));
  return R"(<span class="state live">in progress</span>)";
}

std::string totals(const RunData& run) {
  int finished = 0, failed = 0, running = 0, stopped_for_good = 0;
  for (const auto& j : run.jobs) {
    finished += j.status == "finished";
    failed += j.status == "failed";
    running += j.status == "running";
    stopped_for_good += !j.stopped_by.empty();
  }
  std::vector<Card> cards;
  // Until every job finished or failed, the time so far is no makespan to compare.
  const bool done = run.complete;
  cards.push_back({done ? "makespan" : "elapsed", format_seconds(run.makespan_s),
                   done        ? "wall time of the batch (all runs)"
                   : run.ended ? "work left: resume the run"
                               : fmt::format("ETA {}", format_seconds(run.eta_s))});
  if (run.predicted_makespan_s > 0) {
    std::string note = fmt::format("plan {}", run.predicted_plan);
    if (done)
      note = fmt::format(
          "plan {}; actual {:+.1f}%", run.predicted_plan,
          100.0 * (run.makespan_s - run.predicted_makespan_s) / run.predicted_makespan_s);
    cards.push_back({"predicted makespan", format_seconds(run.predicted_makespan_s), note});
  }
  if (run.lower_bound_s > 0)
    cards.push_back({"lower bound", format_seconds(run.lower_bound_s),
                     done ? fmt::format("makespan is {:.2f}x plan 0's bound",
                                        run.makespan_s / run.lower_bound_s)
                          : "plan 0's bound on the makespan"});
  cards.push_back({"device utilisation", fmt::format("{:.0f}%", 100.0 * run.utilisation),
                   fmt::format("busy device time / ({} devices x {})", run.devices,
                               done ? "makespan" : "elapsed")});
  cards.push_back({"jobs", fmt::format("{} / {} finished", finished, run.jobs.size()),
                   fmt::format("{} failed, {} running{}", failed, running,
                               stopped_for_good > 0 ? fmt::format(", {} stopped early or cancelled",
                                                                  stopped_for_good)
                                                    : "")});
  cards.push_back({"plans", fmt::format("{}", run.plans.size()),
                   fmt::format("{} re-plan{}; {} run{}", run.replans, run.replans == 1 ? "" : "s",
                               run.runs, run.runs == 1 ? "" : "s (resumed)")});
  for (const auto& j : run.jobs)
    if (j.best)
      cards.push_back(
          {run.best_is_final ? "best job" : "leading so far", esc(j.id),
           fmt::format("{} {}", run.best_is_final ? "final val loss" : "val loss so far",
                       loss_text(j.final_val_loss))});
  std::string o = R"(<section id="totals">)";
  for (const auto& c : cards)
    o += fmt::format(R"(<div class="card"><div class="k">{}</div><div class="v{}">{}</div>)"
                     R"(<div class="n">{}</div></div>)",
                     c.key, c.value.size() > 14 ? " long" : "", c.value, c.note);
  return o + "</section>\n";
}

// Devices x time. Each rank has two lanes: what the adopted plan said (each plan from its
// creation to the next plan's), and what ran.
std::string gantt(const RunData& run, const std::map<std::string, std::size_t>& index) {
  const double W = 1220, left = 118, right = 16, top = 58;
  const double plan_h = 13, act_h = 20, gap = 12, row_h = plan_h + 3 + act_h + gap;
  double t_end = std::max(run.now_s, 1e-3);
  for (const auto& p : run.plans)
    for (const auto& pj : p.jobs) {
      const double a = std::max(pj.start_s, p.created_s);
      const double b = p.valid_until_s >= 0 ? std::min(pj.end_s, p.valid_until_s) : pj.end_s;
      if (b > a) t_end = std::max(t_end, b);
    }
  const double plot_w = W - left - right;
  auto x = [&](double t) { return left + plot_w * std::clamp(t / t_end, 0.0, 1.0); };
  const std::size_t rows = std::max<std::size_t>(run.ranks.size(), 1);
  const double H = top + row_h * static_cast<double>(rows) + 30;
  std::map<int, std::size_t> row_of;
  for (std::size_t r = 0; r < run.ranks.size(); ++r) row_of[run.ranks[r]] = r;
  auto lane_y = [&](int rank, bool planned) {
    const double y0 = top + row_h * static_cast<double>(row_of.at(rank));
    return planned ? y0 : y0 + plan_h + 3;
  };

  std::string o =
      fmt::format(R"(<svg id="gantt" width="{0}" height="{1}" viewBox="0 0 {0} {1}" role="img" )"
                  R"(aria-label="devices over time, planned and actual">)",
                  num(W), num(H));
  // Time grid.
  const double step = tick_step(t_end, 12);
  o += R"(<g class="axis">)";
  for (double t = 0; t <= t_end + 1e-9; t += step) {
    o += fmt::format(R"(<line class="grid" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/>)", num(x(t)),
                     num(top - 6), num(H - 26));
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", num(x(t)),
                     num(H - 10), tick_label(t, t_end));
  }
  o += "</g>";
  // Row labels.
  for (std::size_t r = 0; r < run.ranks.size(); ++r) {
    const int rank = run.ranks[r];
    o += fmt::format(R"(<text class="lane-label" x="8" y="{}">plan</text>)",
                     num(lane_y(rank, true) + plan_h - 2));
    o += fmt::format(R"(<text x="8" y="{}" font-size="12" font-weight="600">{}</text>)",
                     num(lane_y(rank, false) + act_h - 5), esc(run.rank_labels[r]));
  }
  // Planned bars.
  o += R"(<g id="gantt-planned">)";
  for (const auto& p : run.plans)
    for (const auto& pj : p.jobs) {
      const double a = std::max(pj.start_s, p.created_s);
      const double b = p.valid_until_s >= 0 ? std::min(pj.end_s, p.valid_until_s) : pj.end_s;
      if (!(b > a) || !index.count(pj.id)) continue;
      const std::string color = job_color(index.at(pj.id));
      for (int rank : pj.ranks)
        o += fmt::format(
            R"(<rect class="bar planned" data-job="{}" data-plan="{}" x="{}" y="{}" )"
            R"(width="{}" height="{}" fill="{}" stroke="{}"><title>{} (plan {}{}): {} x{}, )"
            R"({} to {} planned</title></rect>)",
            esc(pj.id), p.index, num(x(a)), num(lane_y(rank, true)),
            num(std::max(1.0, x(b) - x(a))), num(plan_h), color, color, esc(pj.id), p.index,
            p.reason.empty() ? "" : ", " + esc(p.reason), esc(pj.strategy), pj.devices,
            format_seconds(pj.start_s), format_seconds(pj.end_s));
    }
  o += "</g>";
  // Actual bars; the marks and labels of stops after all of them, so that no later bar hides
  // them.
  o += R"(<g id="gantt-actual">)";
  std::string stops;
  for (const auto& j : run.jobs) {
    const std::size_t k = index.at(j.id);
    const std::string color = job_color(k);
    for (std::size_t s = 0; s < j.segments.size(); ++s) {
      const Segment& seg = j.segments[s];
      const double a = x(seg.start_s), b = std::max(x(seg.end_s), a + 1.5);
      // A job that selection, its early_stop or a cancel ended: its last segment in a style of
      // its own, with a mark and a label (the rung, the rule) where it stopped.
      const bool stopped_here = !j.stopped_by.empty() && s + 1 == j.segments.size();
      const std::string ended = stopped_here ? " ended-" + j.stopped_by : "";
      for (int rank : seg.ranks) {
        const double y = lane_y(rank, false);
        o += fmt::format(
            R"(<rect class="bar actual {}{}" data-job="{}" data-segment="{}" x="{}" y="{}" )"
            R"(width="{}" height="{}" fill="{}"><title>{}</title></rect>)",
            esc(seg.end), esc(ended), esc(j.id), s, num(a), num(y), num(b - a), num(act_h), color,
            esc(describe_segment(j, s, seg)));
        if (stopped_here) {
          const std::string kind = j.stopped_by == "cancel" ? " cancel" : "";
          stops +=
              fmt::format(R"(<path class="stop-mark{}" data-job="{}" data-stopped-by="{}" )"
                          R"(d="M{} {}l6 -5v10z"><title>{}: {} at step {}</title></path>)",
                          kind, esc(j.id), esc(j.stopped_by), num(b), num(y + act_h / 2), esc(j.id),
                          esc(j.reason.empty() ? j.stop_label : j.reason), j.stop_step);
          stops +=
              fmt::format(R"(<text class="stop-label{}" data-job="{}" x="{}" y="{}">{}</text>)",
                          kind, esc(j.id), num(b + 8), num(y + act_h / 2 + 3.5), esc(j.stop_label));
        }
        if (b - a > 16)
          o += fmt::format(R"(<text class="bar-label" x="{}" y="{}">{}</text>)", num(a + 3),
                           num(y + act_h - 6), k + 1);
        if (seg.end == "failed")
          o += fmt::format(R"(<path class="fail-mark" data-job="{}" d="M{} {}l8 8m0 -8l-8 8"/>)",
                           esc(j.id), num(b - 4), num(y + act_h / 2 - 4));
      }
    }
  }
  o += "</g>";
  o += R"(<g id="gantt-stops">)" + stops + "</g>";
  // Markers: re-plans, resumes, signals, failures, and "now" for a run still going.
  std::vector<Marker> markers = run.markers;
  if (run.started && !run.ended) markers.push_back({run.now_s, "now", "now", ""});
  int slot = 0;
  for (const auto& m : markers) {
    const double mx = x(m.t);
    o += fmt::format(R"(<line class="marker {}" x1="{}" x2="{}" y1="{}" y2="{}"{}/>)", esc(m.kind),
                     num(mx), num(mx), num(top - 6), num(H - 26),
                     m.job.empty() ? "" : fmt::format(R"( data-job="{}")", esc(m.job)));
    // Labels in three staggered rows above the chart, so that near markers stay readable.
    const bool flip = mx > W - 200;
    o += fmt::format(R"(<text class="marker-label {}" x="{}" y="{}" text-anchor="{}">{}</text>)",
                     esc(m.kind), num(flip ? mx - 3 : mx + 3), num(14 + 14 * (slot % 3)),
                     flip ? "end" : "start", esc(m.label));
    ++slot;
  }
  o += "</svg>\n";
  return o;
}

// One loss chart (train or val): every job on the same axes as the other chart.
std::string loss_chart(const RunData& run, const std::map<std::string, std::size_t>& index,
                       bool val, double y_lo, double y_hi, double x_hi) {
  const double W = 600, H = 360, left = 52, right = 20, top = 28, bottom = 36;
  const double pw = W - left - right, ph = H - top - bottom;
  auto x = [&](double s) { return left + pw * s / x_hi; };
  auto y = [&](double v) { return top + ph * (1.0 - (v - y_lo) / (y_hi - y_lo)); };
  const std::string id = val ? "val-loss" : "train-loss";
  std::string o = fmt::format(
      R"(<svg id="{0}" width="100%" viewBox="0 0 {1} {2}" role="img" aria-label="{3} loss by step">)",
      id, num(W), num(H), val ? "validation" : "training");
  // The clip leaves room for the points at the chart's edges.
  o += fmt::format(R"(<defs><clipPath id="{}-clip"><rect x="{}" y="{}" width="{}" height="{}"/>)"
                   R"(</clipPath></defs>)",
                   id, num(left - 5), num(top - 5), num(pw + 10), num(ph + 10));
  o += fmt::format(R"(<text x="{}" y="17" font-size="13" font-weight="600">{}</text>)", num(left),
                   val ? "validation loss" : "training loss");
  o += R"(<g class="axis">)";
  const double ys = nice_step(y_hi - y_lo, 6);
  for (double v = std::ceil(y_lo / ys) * ys; v <= y_hi + 1e-12; v += ys) {
    o += fmt::format(R"(<line class="grid" x1="{0}" x2="{1}" y1="{2}" y2="{2}"/>)", num(left),
                     num(left + pw), num(y(v)));
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", num(left - 5),
                     num(y(v) + 4), fmt::format("{:g}", std::round(v / ys) * ys + 0.0));  // no "-0"
  }
  const double xs = nice_step(x_hi, 8);
  for (double s = 0; s <= x_hi + 1e-9; s += xs) {
    o += fmt::format(R"(<line class="grid" x1="{0}" x2="{0}" y1="{1}" y2="{2}"/>)", num(x(s)),
                     num(top), num(top + ph));
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{:g}</text>)", num(x(s)),
                     num(top + ph + 15), s);
  }
  o += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">step</text></g>)",
                   num(left + pw / 2), num(H - 4));
  // Selection rungs: where the jobs were compared.
  for (std::size_t k = 0; k < run.rung_steps.size(); ++k) {
    const double rx = x(static_cast<double>(run.rung_steps[k]));
    o += fmt::format(R"(<line class="rung-mark" data-rung="{}" x1="{}" x2="{}" y1="{}" y2="{}"/>)",
                     k, num(rx), num(rx), num(top), num(top + ph));
    o += fmt::format(R"(<text class="rung-label" x="{}" y="{}">rung {}</text>)", num(rx + 2),
                     num(top + 9), k);
  }
  o += fmt::format(R"x(<g clip-path="url(#{}-clip)">)x", id);
  // The best job last, so that it is drawn on top.
  std::vector<const JobInfo*> order;
  for (const auto& j : run.jobs)
    if (!j.best) order.push_back(&j);
  for (const auto& j : run.jobs)
    if (j.best) order.push_back(&j);
  for (const JobInfo* j : order) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& m : j->metrics) {
      const double v = val ? m.val_loss : m.loss;
      if (std::isfinite(v)) pts.emplace_back(static_cast<double>(m.step), v);
    }
    if (pts.empty()) continue;
    // Long runs: every k-th point keeps the file small; the line looks the same at this size.
    const std::size_t stride = std::max<std::size_t>(1, pts.size() / 1500);
    const std::string color = job_color(index.at(j->id));
    std::string poly;
    for (std::size_t i = 0; i < pts.size(); i += stride)
      poly += fmt::format("{},{} ", num(x(pts[i].first)), num(y(pts[i].second)));
    if ((pts.size() - 1) % stride != 0)
      poly += fmt::format("{},{}", num(x(pts.back().first)), num(y(pts.back().second)));
    const std::string title =
        fmt::format("{}{}: {} loss {:.4f} at step {}", j->id, j->best ? " (best)" : "",
                    val ? "val" : "train", pts.back().second, pts.back().first);
    o += fmt::format(
        R"(<polyline class="curve {}{}" data-job="{}" stroke="{}" points="{}"><title>{}</title></polyline>)",
        val ? "val" : "train", j->best ? " best" : "", esc(j->id), color, poly, esc(title));
    // A stopped or cancelled job's curve ends in a square at its last point.
    if (!j->stopped_by.empty())
      o += fmt::format(
          R"(<rect class="curve-end {}" data-job="{}" data-stopped-by="{}" x="{}" y="{}" )"
          R"(width="7" height="7" fill="{}"><title>{}: {}</title></rect>)",
          val ? "val" : "train", esc(j->id), esc(j->stopped_by), num(x(pts.back().first) - 3.5),
          num(y(pts.back().second) - 3.5), color, esc(j->id), esc(j->reason));
    if (val || pts.size() == 1)
      for (const auto& [s, v] : pts)
        o += fmt::format(
            R"(<circle class="point{}" data-job="{}" cx="{}" cy="{}" r="{}" fill="{}"><title>{} step {}: {:.4f}</title></circle>)",
            j->best ? " best" : "", esc(j->id), num(x(s)), num(y(v)), j->best ? "4.2" : "3", color,
            esc(j->id), s, v);
  }
  o += "</g></svg>";
  return o;
}

std::string curves(const RunData& run, const std::map<std::string, std::size_t>& index) {
  // The value axis is fitted to the jobs that did not fail or diverge: a diverging job would
  // flatten everyone else's curves (its own are clipped at the top). All jobs when every one
  // failed.
  std::vector<double> values, failed_values;
  double x_hi = 1;
  for (const auto& j : run.jobs) {
    x_hi = std::max(x_hi, static_cast<double>(j.steps));
    for (const auto& m : j.metrics) {
      x_hi = std::max(x_hi, static_cast<double>(m.step));
      for (double v : {m.loss, m.val_loss})
        if (std::isfinite(v))
          (j.status == "failed" || (j.stopped_by == "early_stop" && j.stop_label == "diverged")
               ? failed_values
               : values)
              .push_back(v);
    }
  }
  if (values.empty()) values = failed_values;
  if (values.empty())
    return R"(<p class="sub" id="no-curves">No metrics yet: no job has finished a step.</p>)";
  std::sort(values.begin(), values.end());
  double lo = values.front(), hi = values.back();
  // A spike (an unstable step) would do the same: cut the axis above the 98th percentile.
  const double p98 =
      values[static_cast<std::size_t>(0.98 * static_cast<double>(values.size() - 1))];
  if (hi > p98 + 1.5 * (p98 - lo)) hi = p98 + 0.5 * (p98 - lo);
  if (!(hi > lo)) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  std::string o = R"(<div class="curves"><div class="panel">)";
  o += loss_chart(run, index, false, lo, hi, x_hi);
  o += R"(</div><div class="panel">)";
  o += loss_chart(run, index, true, lo, hi, x_hi);
  o += "</div></div>\n<div class=\"legend\">";
  for (const auto& j : run.jobs)
    o += fmt::format(
        R"(<span data-job="{}"><span class="sw" style="background:{}"></span>{}{}</span>)",
        esc(j.id), job_color(index.at(j.id)), esc(j.id),
        j.best ? (run.best_is_final ? " &#9733; best" : " &#9733; leading") : "");
  return o + "</div>\n";
}

std::string jobs_table(const RunData& run, const std::map<std::string, std::size_t>& index) {
  std::string o =
      R"(<table id="jobs"><thead><tr><th>#</th><th>job</th><th>model</th><th class="r">lr</th>)"
      R"(<th class="r">batch</th><th class="r">steps</th><th>strategy &#215; devices per segment</th>)"
      R"(<th class="r">predicted</th><th class="r">actual</th><th class="r">actual / predicted</th>)"
      R"(<th class="r">final val loss</th><th>status</th></tr></thead><tbody>)";
  for (const auto& j : run.jobs) {
    const std::size_t k = index.at(j.id);
    std::string segs;
    for (std::size_t s = 0; s < j.segments.size(); ++s) {
      if (s > 0) segs += " &#8594; ";
      segs += fmt::format(R"(<span title="{}">{}</span>)",
                          esc(describe_segment(j, s, j.segments[s])), segment_text(j.segments[s]));
    }
    if (j.segments.empty()) {
      segs.assign(1, '-');
      if (!run.plans.empty())
        for (const auto& pj : run.plans.back().jobs)
          if (pj.id == j.id)
            segs = fmt::format(R"(<span class="why">planned: {}&#215;{}</span>)", esc(pj.strategy),
                               pj.devices);
    }
    std::string ratio = "-";
    if (j.predicted_s > 0 && j.actual_s > 0 && (j.status == "finished"))
      ratio = fmt::format("{:.2f}", j.actual_s / j.predicted_s);
    std::string status =
        fmt::format(R"(<span class="st-{}">{}</span>)", esc(j.status), esc(j.status));
    if (!j.reason.empty()) status += fmt::format(R"(<div class="why">{}</div>)", esc(j.reason));
    o += fmt::format(
        R"(<tr data-job="{}"{}><td>{}</td><td class="id"><span class="sw" style="background:{}"></span>{}{}</td>)"
        R"(<td>{}</td><td class="r">{}</td><td class="r">{}</td><td class="r">{}/{}</td><td>{}</td>)"
        R"(<td class="r">{}</td><td class="r">{}</td><td class="r">{}</td><td class="r">{}</td><td>{}</td></tr>)",
        esc(j.id), j.best ? R"( class="best")" : "", k + 1, job_color(k), esc(j.id),
        j.best ? " &#9733;" : "", esc(j.model), compact_number(j.lr), j.batch_size, j.steps_done,
        j.steps, segs, format_seconds(j.predicted_s),
        j.segments.empty() ? "-" : format_seconds(j.actual_s), ratio, loss_text(j.final_val_loss),
        status);
  }
  return o + "</tbody></table>\n";
}

std::string plans_table(const RunData& run) {
  if (run.plans.empty()) return R"(<p class="sub">No plan yet.</p>)";
  std::string o = R"(<table id="plans"><thead><tr><th>plan</th><th>made at</th><th>why</th>)"
                  R"(<th class="r">predicted end</th><th class="r">error</th>)"
                  R"(<th class="r">lower bound</th><th>solver</th>)"
                  R"(<th class="r">jobs</th></tr></thead><tbody>)";
  for (const auto& p : run.plans) {
    // Each plan's prediction of the batch's end against the end, once the batch is over.
    const std::string error =
        run.complete && p.makespan_s > 0
            ? fmt::format("{:+.1f}%", 100.0 * (run.makespan_s - p.makespan_s) / p.makespan_s)
            : "-";
    o += fmt::format(
        R"(<tr><td>{}</td><td>{}</td><td>{}</td><td class="r">{}</td><td class="r">{}</td>)"
        R"(<td class="r">{}</td><td>{}{}</td><td class="r">{}</td></tr>)",
        esc(p.file), format_seconds(p.created_s), esc(p.reason), format_seconds(p.makespan_s),
        error, format_seconds(p.lower_bound_s), esc(p.solver_status),
        p.gap > 0 ? fmt::format(", gap {:.1f}%", 100 * p.gap) : "", p.jobs.size());
  }
  return o + "</tbody></table>\n";
}

}  // namespace

std::string render_html(const RunData& run) {
  std::map<std::string, std::size_t> index;
  for (std::size_t k = 0; k < run.jobs.size(); ++k) index[run.jobs[k].id] = k;
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">";
  o += fmt::format("<title>Saturn report: {}</title><style>{}</style></head>\n<body>",
                   esc(run.name), kStyle);
  o += fmt::format(R"(<main id="saturn-report" data-run="{}" data-ended="{}">)", esc(run.name),
                   run.ended ? "true" : "false");
  o += fmt::format("<h1>{}</h1>\n<p class=\"sub\">{} &middot; {} jobs &middot; {} devices {}</p>\n",
                   esc(run.name), esc(run.dir.string()), run.jobs.size(), run.devices,
                   state_badge(run));
  o += totals(run);
  o += "<h2>Devices over time: planned and actual</h2>\n";
  o += "<div class=\"panel\">" + gantt(run, index) + "</div>\n";
  o += "<div class=\"legend\">"
       "<span><span class=\"key\" style=\"background:#4e79a7;opacity:.35;outline:1px dashed "
       "#4e79a7\"></span>plan lane: the adopted plan (each plan from its creation to the "
       "next)</span>"
       "<span><span class=\"key\" style=\"background:#4e79a7\"></span>actual lane: what ran (the "
       "number is the job's # in the table)</span>"
       "<span style=\"color:#b45309\">- - re-plan</span><span style=\"color:#1d4ed8\">- - resumed "
       "run</span><span style=\"color:#4b5563\">- - signal</span><span style=\"color:#991b1b\">"
       "&#10005; failure</span>";
  if (!run.ended) o += "<span style=\"color:#047857\">| now</span>";
  bool any_stop = false;
  for (const auto& j : run.jobs) any_stop |= !j.stopped_by.empty();
  if (any_stop)
    o += "<span id=\"legend-stop\" style=\"color:#8a5a00\">&#9664; stopped for good: by "
         "selection (rung K) or early_stop (diverged, patience); grey: cancelled</span>";
  if (!run.rung_steps.empty())
    o += "<span id=\"legend-rung\" style=\"color:#6d28d9\">- - rung (loss charts): where "
         "selection compares the jobs</span>";
  o += "</div>\n";
  o += "<h2>Loss by step (same axes for all jobs and both charts)</h2>\n";
  o += curves(run, index);
  o += "<h2>Jobs</h2>\n" + jobs_table(run, index);
  o += "<p class=\"why\">predicted: the job's duration in the first plan that scheduled it; "
       "actual: the sum of its segments (all runs).</p>\n";
  o += "<h2>Plans</h2>\n" + plans_table(run);
  o += fmt::format(
      "<footer>saturn report of {}; times are batch time (seconds since the run's first plan, "
      "continued across resumed runs).</footer>\n",
      esc(run.dir.string()));
  o += "</main></body></html>\n";
  return o;
}

}  // namespace saturn::report
