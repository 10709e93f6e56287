// `saturn status`: the report's facts as terminal text, readable while the batch runs.
#include <fmt/format.h>

#include <cmath>

#include "runtime/report/run_data.hpp"

namespace saturn::report {
namespace {

std::string loss_text(double v) {
  return std::isfinite(v) ? fmt::format("{:.4f}", v) : "-";
}

// The configuration a job runs (or ran last, or is planned to run).
std::string config_text(const RunData& run, const JobInfo& j) {
  if (!j.segments.empty()) {
    const Segment& s = j.segments.back();
    std::string t = fmt::format("{} x{}", s.strategy, s.ranks.size());
    if (j.segments.size() > 1) t += fmt::format(" ({} segs)", j.segments.size());
    return t;
  }
  if (!run.plans.empty())
    for (const auto& pj : run.plans.back().jobs)
      if (pj.id == j.id) return fmt::format("{} x{} (plan)", pj.strategy, pj.devices);
  return "-";
}

std::string state_text(const RunData& run) {
  const std::string resume = fmt::format("`saturn run --resume {}` continues it", run.dir.string());
  if (!run.started) return "starting: profiling and planning (no timeline.jsonl yet)";
  if (run.ended) {
    if (run.exit_code == 0) return "finished";
    if (run.exit_code == 99) return fmt::format("stopped with work left (exit 99); {}", resume);
    return fmt::format("ended with failed jobs (exit {})", run.exit_code);
  }
  // Files of a live run change every few seconds (metrics lines, progress); a run killed
  // without its run_end event leaves them still.
  if (run.seconds_since_update >= 0 && run.seconds_since_update > 300)
    return fmt::format("not ended, but no file changed for {}: killed? {}",
                       format_seconds(run.seconds_since_update), resume);
  if (run.seconds_since_update >= 0)
    return fmt::format("running (last update {} ago)", format_seconds(run.seconds_since_update));
  return "running";
}

}  // namespace

std::string render_status(const RunData& run) {
  int finished = 0, running = 0, failed = 0;
  for (const auto& j : run.jobs) {
    finished += j.status == "finished";
    running += j.status == "running";
    failed += j.status == "failed";
  }
  std::string out = fmt::format("{} ({}): {}\n", run.name, run.dir.string(), state_text(run));
  out += fmt::format("batch: {}/{} jobs finished, {} running{} | elapsed {} | ETA {} | {} plan{}",
                     finished, run.jobs.size(), running,
                     failed > 0 ? fmt::format(", {} failed", failed) : "",
                     format_seconds(run.makespan_s), run.ended ? "-" : format_seconds(run.eta_s),
                     run.plans.size(), run.plans.size() == 1 ? "" : "s");
  if (run.runs > 1) out += fmt::format(", {} runs (resumed)", run.runs);
  out += "\n";
  std::size_t w = 28;
  for (const auto& j : run.jobs) w = std::max(w, j.id.size());
  out += fmt::format("  {:<{}} {:<22} {:>13} {:>8} {:>8} {:>9} {:>8}  {}\n", "job", w,
                     "strategy x devices", "step", "loss", "val", "tok/s", "ETA", "status");
  for (const auto& j : run.jobs) {
    std::string status = j.status + (j.best ? (run.best_is_final ? " *best*" : " *leading*") : "");
    if (!j.reason.empty() && j.status == "failed") status += ": " + j.reason;
    out += fmt::format(
        "  {:<{}} {:<22} {:>13} {:>8} {:>8} {:>9} {:>8}  {}\n", j.id, w, config_text(run, j),
        fmt::format("{}/{}", j.steps_done, j.steps), loss_text(j.last_loss),
        loss_text(j.final_val_loss),
        j.tokens_per_s > 0 ? fmt::format("{:.0f}", j.tokens_per_s) : "-",
        j.status == "finished" || j.status == "failed" ? "-" : format_seconds(j.eta_s), status);
  }
  if (!run.best_job.empty()) {
    for (const auto& j : run.jobs)
      if (j.best)
        out +=
            fmt::format("{}: {} (val loss {:.4f})\n",
                        run.best_is_final ? "best job" : "leading so far", j.id, j.final_val_loss);
  }
  if (!run.plans.empty()) {
    std::string pred = format_seconds(run.predicted_makespan_s);
    if (run.complete && run.predicted_makespan_s > 0)
      pred += fmt::format(
          " ({:+.1f}% actual vs predicted)",
          100.0 * (run.makespan_s - run.predicted_makespan_s) / run.predicted_makespan_s);
    out += fmt::format(
        "{} {} | predicted (plan {}) {} | lower bound {} | device utilisation {:.0f}% of {} "
        "devices\n",
        run.complete ? "makespan" : "elapsed", format_seconds(run.makespan_s), run.predicted_plan,
        pred, format_seconds(run.lower_bound_s), 100.0 * run.utilisation, run.devices);
  }
  return out;
}

}  // namespace saturn::report
