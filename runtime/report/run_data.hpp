// What a run directory of `saturn run` says about its batch (DESIGN.md "Run directory"), read
// for `saturn report` and `saturn status`. The timeline is the history: it is appended to by
// every run of the directory (first run, resumes), while summary.json only describes the latest
// run and exists only once a run ended. So jobs, segments, statuses and times are rebuilt from
// timeline.jsonl, plans/ and jobs/*/metrics.jsonl; workload.yaml gives each job's settings.
//
// A run still going (or killed) leaves partial files: the last line of a .jsonl file that does
// not end in a newline or does not parse is a write in progress and is ignored. Anything else
// that is wrong is an InputError naming the file (and line or field) and what is wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace saturn::report {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One line of jobs/<id>/metrics.jsonl. NaN where the line has no such value.
struct MetricPoint {
  std::int64_t step = 0;
  double loss = kNaN;
  double val_loss = kNaN;
  double lr = kNaN;
  double tokens_per_s = 0;
  double time_s = 0;  // since the segment that wrote the line started training
};

// A stretch of time a job ran on a set of ranks with one strategy (a job_start event and the
// event that ended it).
struct Segment {
  std::string strategy;
  std::vector<std::string> knobs;
  std::vector<int> ranks;
  double start_s = 0, end_s = 0;  // batch time (timeline "t")
  std::int64_t start_step = 0, end_step = 0;
  // finished | failed | stopped (re-plan or signal: checkpointed) | running (no end yet) |
  // lost (the run ended or restarted without hearing from it: killed)
  std::string end;
  std::string reason;  // of a failure or a stop
};

// A job of one plan file, with the part of time this plan was the adopted one.
struct PlannedJob {
  std::string id;
  std::string strategy;
  int devices = 0;
  std::vector<int> ranks;
  double start_s = 0, end_s = 0;  // batch time
};

struct PlanInfo {
  int index = 0;
  std::string file;  // plans/plan-NNN.json
  std::string reason;
  double created_s = 0;
  double makespan_s = 0;      // batch time at which this plan expected the batch to end
  double lower_bound_s = 0;   // batch time: created_s + the plan's lower bound on what was left
  double valid_until_s = -1;  // created_s of the next plan; -1: the latest plan
  std::string solver_status;
  double gap = 0;
  std::vector<PlannedJob> jobs;
};

// Something the Gantt chart marks with a vertical line.
struct Marker {
  double t = 0;
  std::string kind;  // replan | resume | signal | failure
  std::string label;
  std::string job;  // for failures
};

struct JobInfo {
  std::string id;
  std::string model;
  double lr = 0;
  std::int64_t batch_size = 0;
  std::int64_t steps = 0;  // to train
  std::int64_t steps_done = 0;
  // pending | running | finished | failed | stopped (checkpointed, waiting for --resume)
  // | interrupted (its last segment was lost)
  std::string status = "pending";
  std::string reason;
  std::vector<Segment> segments;
  std::vector<MetricPoint> metrics;  // by step, one point per step
  double predicted_s = -1;  // its duration in the first plan that scheduled it; -1: never planned
  double actual_s = 0;      // sum of its segments
  double final_val_loss = kNaN;
  double last_loss = kNaN;
  double tokens_per_s = 0;  // of its last metrics line
  double step_time_s = 0;   // recent seconds per step (0: unknown)
  double eta_s = -1;        // time it still needs (-1: unknown; 0: done)
  bool best = false;
  // Ended before its last step for good: "selection" (stopped at a rung), "early_stop" (its
  // early_stop rule), "cancel" (saturn cancel); "" otherwise. When (batch time), at which step,
  // and for selection the rung (-1: none); stop_label: what the charts write at the stop.
  std::string stopped_by;
  double stop_t = -1;
  std::int64_t stop_step = -1;
  int stop_rung = -1;
  std::string stop_label;
};

struct RunData {
  std::filesystem::path dir;
  std::string name;           // the workload's name
  std::vector<JobInfo> jobs;  // in workload order
  std::vector<PlanInfo> plans;
  std::vector<Marker> markers;
  std::vector<std::int64_t> rung_steps;  // the workload's selection rungs (empty: no selection)
  std::vector<int> ranks;  // every rank any plan or segment used, ascending: the Gantt rows
  std::vector<std::string> rank_labels;  // same order: "n0 r2"
  int devices = 0;       // devices of the cluster (cluster.json), at least the ranks seen
  int runs = 0;          // how many times `saturn run` started on this directory
  int replans = 0;       // plans adopted during a run (not the first plan of each run)
  bool started = false;  // timeline.jsonl exists (profiling and planning are over)
  bool ended = false;    // the latest run ended (run_end event)
  // ended, and every job finished, failed, or stopped for good (selection, early_stop,
  // cancel): the makespan is final
  bool complete = false;
  int exit_code = -1;     // of the latest run when it ended
  double now_s = 0;       // batch time of the newest thing the files show
  double makespan_s = 0;  // now_s once ended; elapsed so far otherwise
  // The makespan predicted by the first plan that knew all of the batch's work, over every run
  // of the directory: plan 0's, or once `saturn submit` added jobs, that of the plan that first
  // placed the last of them. (summary.json's predicted_makespan_s applies the same rule from
  // the latest run's first plan, so after a --resume it can name a later plan.)
  double predicted_makespan_s = -1;
  int predicted_plan = -1;           // the index of that plan
  double lower_bound_s = -1;         // plan 0's
  double busy_device_s = 0;          // sum over segments of devices x duration
  double utilisation = 0;            // busy / (devices x makespan)
  double eta_s = -1;                 // until the batch ends (-1: unknown, 0: ended)
  double seconds_since_update = -1;  // wall time since any of the run's files changed
  // Lowest final val loss among finished jobs; while none has finished, the lowest so far.
  std::string best_job;
  bool best_is_final = false;
};

// Reads RUN_DIR. Throws InputError naming the file when the directory is not a run directory
// or a file in it is malformed.
RunData read_run(const std::filesystem::path& dir);

// One .jsonl file as JSON objects, with their 1-based line numbers. Empty lines are skipped; a
// last line without a newline or that does not parse is ignored (a write in progress); any
// other line that is not a JSON object is an InputError "FILE:LINE: ...".
struct JsonLine {
  int line = 0;
  nlohmann::json value;
};
std::vector<JsonLine> read_jsonl(const std::filesystem::path& file);

// "1:02:03" / "12.3s" (as the rest of Saturn prints durations); "-" for negative values.
std::string format_seconds(double s);

// The HTML report: one self-contained file (inline CSS and SVG, no script, nothing fetched).
// Every job's chart elements carry data-job="<id>": planned and actual Gantt bars
// (class "bar planned" / "bar actual") in <svg id="gantt">, loss curves (class "curve") in
// <svg id="train-loss"> and <svg id="val-loss">, and its row in <table id="jobs">.
std::string render_html(const RunData& run);

// The terminal summary of `saturn status`: batch state, elapsed, ETA, one row per job.
std::string render_status(const RunData& run);

}  // namespace saturn::report
