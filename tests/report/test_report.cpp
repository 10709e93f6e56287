// saturn report / status on synthetic run directories: a re-plan that moves a job, a failed job,
// a signal and a resumed run, a run killed without its run_end, a live job whose last metrics
// line is half written; and the errors for directories that are not runs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/report/run_data.hpp"

namespace fs = std::filesystem;
using saturn::InputError;
using saturn::report::read_run;
using saturn::report::RunData;

namespace {

const char* kWorkload = R"(name: synth
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 16, steps: 10, eval_every: 5, checkpoint_every: 5}
models:
  tiny: {arch: gpt2, n_layer: 1, n_head: 1, d_model: 8}
jobs:
  - {name: a, model: tiny, lr: 1e-3, batch_size: 4}
  - {name: b, model: tiny, lr: 3e-3, batch_size: 4}
  - {name: c, model: tiny, lr: 10, batch_size: 8}
)";

const char* kCluster =
    R"({"device_kind":"cpu","nodes":[{"name":"n0","devices":3,"memory_gib":0,"ranks":[0,1,2]}]})";

std::string plan_json(double created, double makespan, double lb, const std::string& reason,
                      const std::string& jobs) {
  return "{\"version\":1,\"created_s\":" + std::to_string(created) +
         ",\"makespan_s\":" + std::to_string(makespan) +
         ",\"lower_bound_s\":" + std::to_string(lb) + ",\"reason\":\"" + reason +
         "\",\"solver\":{\"status\":\"optimal\",\"gap\":0},\"jobs\":[" + jobs + "]}";
}

std::string pjob(const std::string& id, const std::string& strategy, const std::string& ranks,
                 double start, double end) {
  return "{\"id\":\"" + id + "\",\"strategy\":\"" + strategy +
         "\",\"devices\":1,\"ranks\":" + ranks + ",\"start_s\":" + std::to_string(start) +
         ",\"end_s\":" + std::to_string(end) + "}";
}

std::string metric(int step, double loss, double time_s, double val = NAN) {
  std::string s = "{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(loss) +
                  ",\"lr\":0.001,\"tokens_per_s\":1000.0,\"time_s\":" + std::to_string(time_s);
  if (std::isfinite(val)) s += ",\"val_loss\":" + std::to_string(val);
  return s + "}\n";
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::trunc | std::ios::binary) << text;
}

class ReportTest : public ::testing::Test {
 protected:
  fs::path dir;
  void SetUp() override {
    dir =
        fs::temp_directory_path() /
        ("saturn-report-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    write(dir / "workload.yaml", kWorkload);
    write(dir / "cluster.json", kCluster);
    // Run 1: plan 0; b is moved by re-plan 1 to two ranks; a finishes; c starts and fails;
    // a signal stops b (exit 99). Run 2 (resume): plan 2, b runs again and is still going.
    write(dir / "plans/plan-000.json",
          plan_json(0, 20, 15, "initial",
                    pjob("a", "ddp", "[0]", 0, 10) + "," + pjob("b", "ddp", "[1]", 0, 12) + "," +
                        pjob("c", "ddp", "[0]", 10, 20)));
    write(dir / "plans/plan-001.json",
          plan_json(5, 18, 10, "interval",
                    pjob("a", "ddp", "[0]", 5, 10) + "," + pjob("b", "fsdp", "[1,2]", 5.2, 9) +
                        "," + pjob("c", "ddp", "[0]", 10, 18)));
    write(dir / "plans/plan-002.json",
          plan_json(12.6, 16, 3, "initial", pjob("b", "ddp", "[0]", 12.6, 16)));
    write(dir / "timeline.jsonl",
          R"({"event":"plan","plan":0,"reason":"initial","makespan_s":20,"lower_bound_s":15,"t":0.0}
{"event":"job_start","job":"a","strategy":"ddp","knobs":[],"devices":1,"ranks":[0],"step":0,"segment":0,"t":0.1}
{"event":"job_start","job":"b","strategy":"ddp","knobs":[],"devices":1,"ranks":[1],"step":0,"segment":0,"t":0.1}
{"event":"replan","plan":1,"reason":"interval","makespan_s":18,"lower_bound_s":15,"t":5.0}
{"event":"job_stop","job":"b","step":4,"segment":0,"reason":"re-plan","t":5.2}
{"event":"job_start","job":"b","strategy":"fsdp","knobs":["prefetch"],"devices":2,"ranks":[1,2],"step":4,"segment":1,"t":5.3}
{"event":"job_end","job":"a","step":10,"segment":0,"val_loss":2.0,"t":10.0}
{"event":"job_start","job":"c","strategy":"ddp","knobs":[],"devices":1,"ranks":[0],"step":0,"segment":0,"t":10.1}
{"event":"failure","job":"c","step":2,"segment":0,"reason":"job c: loss became nan at step 3","t":11.0}
{"event":"signal","signal":10,"t":12.0}
{"event":"job_stop","job":"b","step":7,"segment":1,"reason":"signal 10","t":12.5}
{"event":"run_end","exit_code":99,"t":12.6}
{"event":"plan","plan":2,"reason":"initial","makespan_s":16,"lower_bound_s":15.6,"t":12.6}
{"event":"job_start","job":"b","strategy":"ddp","knobs":[],"devices":1,"ranks":[0],"step":7,"segment":0,"t":12.7}
)");
    std::string a, b, c;
    for (int s = 1; s <= 10; ++s)
      a += metric(s, 5.0 - 0.2 * s, s * 1.0, s % 5 == 0 ? 4.0 - 0.2 * s : NAN);
    for (int s = 1; s <= 4; ++s) b += metric(s, 5.0 - 0.1 * s, s * 1.0, NAN);
    for (int s = 5; s <= 7; ++s) b += metric(s, 5.0 - 0.1 * s, (s - 4) * 2.0, s == 5 ? 3.5 : NAN);
    for (int s = 8; s <= 9; ++s) b += metric(s, 5.0 - 0.1 * s, (s - 7) * 0.5, NAN);
    b += R"({"step":10,"loss":4.)";  // half written: the writer is on this line
    for (int s = 1; s <= 2; ++s) c += metric(s, 30.0 * s, s * 0.3, NAN);
    write(dir / "jobs/a/metrics.jsonl", a);
    write(dir / "jobs/b/metrics.jsonl", b);
    write(dir / "jobs/c/metrics.jsonl", c);
  }
  void TearDown() override { fs::remove_all(dir); }

  const saturn::report::JobInfo& job(const RunData& r, const std::string& id) {
    for (const auto& j : r.jobs)
      if (j.id == id) return j;
    throw std::runtime_error("no job " + id);
  }
};

std::string error_of(const fs::path& dir) {
  try {
    read_run(dir);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_F(ReportTest, RebuildsJobsSegmentsAndRunsFromTheTimeline) {
  const RunData r = read_run(dir);
  EXPECT_EQ(r.name, "synth");
  ASSERT_EQ(r.jobs.size(), 3u);
  EXPECT_TRUE(r.started);
  EXPECT_FALSE(r.ended);  // run 2 is going
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.runs, 2);
  EXPECT_EQ(r.replans, 1);  // plan 2 is the resumed run's first plan, not a re-plan
  ASSERT_EQ(r.plans.size(), 3u);
  EXPECT_DOUBLE_EQ(r.plans[0].valid_until_s, 5.0);
  EXPECT_DOUBLE_EQ(r.plans[1].valid_until_s, 12.6);
  EXPECT_DOUBLE_EQ(r.plans[2].valid_until_s, -1);
  EXPECT_DOUBLE_EQ(r.plans[1].lower_bound_s, 15.0);  // created 5 + bound 10

  const auto& a = job(r, "a");
  EXPECT_EQ(a.status, "finished");
  EXPECT_EQ(a.steps_done, 10);
  EXPECT_DOUBLE_EQ(a.final_val_loss, 2.0);  // job_end's value
  EXPECT_DOUBLE_EQ(a.predicted_s, 10.0);    // its duration in plan 0
  EXPECT_NEAR(a.actual_s, 9.9, 1e-9);
  EXPECT_TRUE(a.best);
  EXPECT_EQ(r.best_job, "a");
  EXPECT_TRUE(r.best_is_final);

  const auto& b = job(r, "b");
  ASSERT_EQ(b.segments.size(), 3u);
  EXPECT_EQ(b.segments[0].end, "stopped");
  EXPECT_EQ(b.segments[0].reason, "re-plan");
  EXPECT_EQ(b.segments[1].strategy, "fsdp");
  EXPECT_EQ(b.segments[1].ranks, (std::vector<int>{1, 2}));
  EXPECT_EQ(b.segments[1].knobs, (std::vector<std::string>{"prefetch"}));
  EXPECT_EQ(b.segments[1].end, "stopped");
  EXPECT_EQ(b.segments[1].end_step, 7);
  EXPECT_EQ(b.segments[2].end, "running");
  EXPECT_EQ(b.status, "running");
  // The half-written line for step 10 is not a record.
  ASSERT_EQ(b.metrics.size(), 9u);
  EXPECT_EQ(b.steps_done, 9);
  EXPECT_DOUBLE_EQ(b.last_loss, 5.0 - 0.1 * 9);
  EXPECT_DOUBLE_EQ(b.final_val_loss, 3.5);
  // The running segment reaches its start plus the newest metrics line's training time.
  EXPECT_DOUBLE_EQ(b.segments[2].end_s, 12.7 + 1.0);
  EXPECT_DOUBLE_EQ(r.now_s, 13.7);
  // 0.5 s per step over steps 8..9, one step left.
  EXPECT_DOUBLE_EQ(b.step_time_s, 0.5);
  EXPECT_DOUBLE_EQ(b.eta_s, 0.5);
  EXPECT_DOUBLE_EQ(r.eta_s, 0.5);

  const auto& c = job(r, "c");
  EXPECT_EQ(c.status, "failed");
  EXPECT_EQ(c.reason, "job c: loss became nan at step 3");
  ASSERT_EQ(c.segments.size(), 1u);
  EXPECT_EQ(c.segments[0].end, "failed");
  EXPECT_FALSE(std::isfinite(c.final_val_loss));
  EXPECT_DOUBLE_EQ(c.eta_s, 0);

  // Markers for the Gantt chart, in time order.
  std::vector<std::string> kinds;
  for (const auto& m : r.markers) kinds.push_back(m.kind);
  EXPECT_EQ(kinds, (std::vector<std::string>{"replan", "failure", "signal", "resume"}));
  EXPECT_EQ(r.markers[1].job, "c");
  EXPECT_EQ(r.ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(r.rank_labels[2], "n0 r2");
  EXPECT_EQ(r.devices, 3);
  // Busy device time: a 9.9, b 5.1 + 2x7.2 + 1.0, c 0.9.
  EXPECT_NEAR(r.busy_device_s, 9.9 + 5.1 + 14.4 + 1.0 + 0.9, 1e-9);
  EXPECT_NEAR(r.utilisation, r.busy_device_s / (3 * 13.7), 1e-12);
  EXPECT_DOUBLE_EQ(r.predicted_makespan_s, 20);
  EXPECT_DOUBLE_EQ(r.lower_bound_s, 15);
}

TEST_F(ReportTest, HtmlHasEveryJobsBarsCurvesAndRowAndNoScript) {
  const std::string html = saturn::report::render_html(read_run(dir));
  for (const std::string id : {"a", "b", "c"}) {
    const std::string attr = "data-job=\"" + id + "\"";
    EXPECT_NE(html.find("class=\"bar planned\" " + attr), std::string::npos) << id;
    EXPECT_NE(html.find(attr + " data-segment=\"0\""), std::string::npos) << id;
    EXPECT_NE(html.find("<polyline class=\"curve train" + std::string(id == "a" ? " best" : "") +
                        "\" " + attr),
              std::string::npos)
        << id;
    EXPECT_NE(html.find("<tr " + attr), std::string::npos) << id;
  }
  // Val curves: a and b have val losses, c failed before its first evaluation.
  EXPECT_NE(html.find("<polyline class=\"curve val best\" data-job=\"a\""), std::string::npos);
  EXPECT_NE(html.find("<polyline class=\"curve val\" data-job=\"b\""), std::string::npos);
  EXPECT_EQ(html.find("<polyline class=\"curve val\" data-job=\"c\""), std::string::npos);
  // b ran three segments: the third on rank 0.
  EXPECT_NE(html.find("class=\"bar actual running\" data-job=\"b\" data-segment=\"2\""),
            std::string::npos);
  EXPECT_NE(html.find("class=\"bar actual failed\" data-job=\"c\""), std::string::npos);
  EXPECT_NE(html.find("class=\"fail-mark\" data-job=\"c\""), std::string::npos);
  for (const std::string kind : {"replan", "resume", "signal", "failure", "now"})
    EXPECT_NE(html.find("<line class=\"marker " + kind + "\""), std::string::npos) << kind;
  EXPECT_NE(html.find("fsdp&#215;2"), std::string::npos);
  EXPECT_NE(html.find("job c: loss became nan at step 3"), std::string::npos);
  // Self-contained: nothing to run, nothing to fetch.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
}

// A run with selection (rungs at steps 4 and 8): a is promoted and finishes, b is stopped by
// selection at rung 0, c is stopped by its early_stop (diverged). The Gantt chart marks each
// stop (style, mark, label), the loss charts mark the rungs, and stopped curves end in a mark.
TEST_F(ReportTest, HtmlMarksSelectionStopsAndRungs) {
  std::string workload = kWorkload;
  workload.replace(workload.find("eval_every: 5"), 13, "eval_every: 2");  // rungs 4 and 8
  write(dir / "workload.yaml", workload + R"(  - {name: d, model: tiny, lr: 2e-3, batch_size: 4}
selection: {method: successive-halving, min_steps: 4, reduction_factor: 2, max_rungs: 2}
)");
  write(dir / "timeline.jsonl",
        R"({"event":"plan","plan":0,"reason":"initial","makespan_s":20,"lower_bound_s":15,"t":0.0}
{"event":"job_start","job":"a","strategy":"ddp","knobs":[],"devices":1,"ranks":[0],"step":0,"segment":0,"t":0.1}
{"event":"job_start","job":"b","strategy":"ddp","knobs":[],"devices":1,"ranks":[1],"step":0,"segment":0,"t":0.1}
{"event":"job_start","job":"c","strategy":"ddp","knobs":[],"devices":1,"ranks":[2],"step":0,"segment":0,"t":0.1}
{"event":"job_stop","job":"c","step":2,"segment":0,"reason":"early_stop: diverged at step 2","t":1.0}
{"event":"early_stop","job":"c","rule":"diverged","step":2,"metric":"loss","value":60.0,"reference":10.0,"t":1.0}
{"event":"job_stop","job":"a","step":4,"segment":0,"reason":"selection rung at step 4","t":4.0}
{"event":"rung","job":"a","rung":0,"step":4,"val_loss":3.2,"t":4.0}
{"event":"job_stop","job":"b","step":4,"segment":0,"reason":"selection rung at step 4","t":4.1}
{"event":"rung","job":"b","rung":0,"step":4,"val_loss":3.6,"t":4.1}
{"event":"promote","job":"a","rung":0,"step":4,"val_loss":3.2,"place":1,"compared":2,"kept":1,"t":4.1}
{"event":"selection_stop","job":"b","rung":0,"step":4,"val_loss":3.6,"place":2,"compared":2,"kept":1,"t":4.1}
{"event":"cancel","job":"d","step":0,"t":4.2}
{"event":"job_start","job":"a","strategy":"ddp","knobs":[],"devices":1,"ranks":[1],"step":4,"segment":1,"t":4.3}
{"event":"job_end","job":"a","step":10,"segment":1,"val_loss":2.0,"t":10.0}
{"event":"run_end","exit_code":0,"t":10.1}
)");
  std::string b;
  for (int s = 1; s <= 4; ++s) b += metric(s, 5.0 - 0.1 * s, s * 1.0, s == 4 ? 3.6 : NAN);
  write(dir / "jobs/b/metrics.jsonl", b);
  const RunData r = read_run(dir);
  EXPECT_EQ(r.rung_steps, (std::vector<std::int64_t>{4, 8}));
  EXPECT_EQ(job(r, "b").stopped_by, "selection");
  EXPECT_EQ(job(r, "b").stop_rung, 0);
  EXPECT_EQ(job(r, "b").stop_step, 4);
  EXPECT_EQ(job(r, "c").stopped_by, "early_stop");
  EXPECT_EQ(job(r, "c").stop_label, "diverged");
  EXPECT_EQ(job(r, "d").stopped_by, "cancel");
  EXPECT_EQ(job(r, "a").stopped_by, "");
  EXPECT_TRUE(r.complete);  // every job finished or stopped for good: the makespan is final
  const std::string html = saturn::report::render_html(r);
  // Each plan's error against the final makespan (10.1 s): plan 0 said 20 s, plan 2 16 s.
  EXPECT_DOUBLE_EQ(r.makespan_s, 10.1);
  EXPECT_NE(html.find(R"(<td class="r">-49.5%</td>)"), std::string::npos);
  EXPECT_NE(html.find(R"(<td class="r">-36.9%</td>)"), std::string::npos);
  // Gantt: the stopped jobs' last segments in their own style, each with a mark and a label.
  EXPECT_NE(html.find(R"(class="bar actual stopped ended-selection" data-job="b")"),
            std::string::npos);
  EXPECT_NE(html.find(R"(class="bar actual stopped ended-early_stop" data-job="c")"),
            std::string::npos);
  EXPECT_NE(html.find(R"(<path class="stop-mark" data-job="b" data-stopped-by="selection")"),
            std::string::npos);
  // The label's text: what stopped the job.
  const auto label_of = [&](const std::string& id) {
    const auto at = html.find(R"(<text class="stop-label" data-job=")" + id + "\"");
    if (at == std::string::npos) return std::string("(none)");
    const auto open = html.find('>', at) + 1;
    return html.substr(open, html.find("</text>", open) - open);
  };
  EXPECT_EQ(label_of("b"), "rung 0");
  EXPECT_EQ(label_of("c"), "diverged");
  EXPECT_EQ(label_of("a"), "(none)");
  EXPECT_NE(html.find(R"(<path class="stop-mark" data-job="c" data-stopped-by="early_stop")"),
            std::string::npos);
  // a was promoted, not stopped: no stop mark, its segments in the plain style.
  EXPECT_EQ(html.find(R"(class="stop-mark" data-job="a")"), std::string::npos);
  EXPECT_NE(html.find(R"(class="bar actual finished" data-job="a" data-segment="1")"),
            std::string::npos);
  // Loss charts: a line per rung in each chart; stopped curves end in a mark, a's does not.
  std::size_t rung_lines = 0;
  for (auto at = html.find(R"(<line class="rung-mark")"); at != std::string::npos;
       at = html.find(R"(<line class="rung-mark")", at + 1))
    ++rung_lines;
  EXPECT_EQ(rung_lines, 4u);  // 2 rungs x (train, val)
  EXPECT_NE(html.find(R"(data-rung="1")"), std::string::npos);
  EXPECT_NE(html.find(R"(<rect class="curve-end val" data-job="b" data-stopped-by="selection")"),
            std::string::npos);
  EXPECT_NE(html.find(R"(<rect class="curve-end train" data-job="c")"), std::string::npos);
  EXPECT_EQ(html.find(R"(class="curve-end train" data-job="a")"), std::string::npos);
  EXPECT_NE(html.find(R"(id="legend-stop")"), std::string::npos);
  EXPECT_NE(html.find(R"(id="legend-rung")"), std::string::npos);
}

// Without selection: no rung marks anywhere.
TEST_F(ReportTest, HtmlHasNoRungMarksWithoutSelection) {
  const std::string html = saturn::report::render_html(read_run(dir));
  EXPECT_EQ(html.find("<line class=\"rung-mark"), std::string::npos);
  EXPECT_EQ(html.find("class=\"stop-mark"), std::string::npos);
  EXPECT_EQ(html.find("legend-rung"), std::string::npos);
}

TEST_F(ReportTest, StatusShowsLiveProgressPerJob) {
  const std::string s = saturn::report::render_status(read_run(dir));
  EXPECT_NE(s.find("synth"), std::string::npos) << s;
  EXPECT_NE(s.find("1/3 jobs finished, 1 running, 1 failed"), std::string::npos) << s;
  EXPECT_NE(s.find("9/10"), std::string::npos) << s;
  EXPECT_NE(s.find("ddp x1 (3 segs)"), std::string::npos) << s;
  EXPECT_NE(s.find("failed: job c: loss became nan"), std::string::npos) << s;
  EXPECT_NE(s.find("best job: a (val loss 2.0000)"), std::string::npos) << s;
  EXPECT_NE(s.find("2 runs (resumed)"), std::string::npos) << s;
  EXPECT_NE(s.find("running (last update"), std::string::npos) << s;
}

// Plan 0 knew nothing of a job `saturn submit` added later: the prediction shown is that of the
// plan that first placed it, labelled with its index.
TEST_F(ReportTest, PredictionIsThatOfThePlanThatFirstPlacedASubmittedJob) {
  {
    const RunData r = read_run(dir);
    EXPECT_EQ(r.predicted_plan, 0);
    EXPECT_DOUBLE_EQ(r.predicted_makespan_s, 20.0);
    const std::string s = saturn::report::render_status(r);
    EXPECT_NE(s.find("predicted (plan 0) 20.0s"), std::string::npos) << s;
    EXPECT_NE(saturn::report::render_html(r).find(R"(<div class="n">plan 0</div>)"),
              std::string::npos);
  }
  write(
      dir / "submitted/0001-more.json",
      R"({"source":"more.yaml","yaml":"jobs:\n  - {name: d, model: tiny, lr: 2e-3, batch_size: 4}\n"})");
  write(dir / "plans/plan-001.json",
        plan_json(5, 18, 10, "1 job(s) submitted",
                  pjob("a", "ddp", "[0]", 5, 10) + "," + pjob("b", "fsdp", "[1,2]", 5.2, 9) + "," +
                      pjob("c", "ddp", "[0]", 10, 18) + "," + pjob("d", "ddp", "[2]", 9, 17)));
  std::ifstream in(dir / "timeline.jsonl");
  std::string line, text;
  while (std::getline(in, line)) {
    if (line.find(R"("event":"replan","plan":1)") != std::string::npos)
      text +=
          R"({"event":"submit","jobs":["d"],"request":"0001-more.json","source":"more.yaml","t":4.9})"
          "\n";
    text += line + "\n";
  }
  in.close();
  write(dir / "timeline.jsonl", text);
  const RunData r = read_run(dir);
  ASSERT_EQ(r.jobs.size(), 4u);
  EXPECT_EQ(r.predicted_plan, 1);
  EXPECT_DOUBLE_EQ(r.predicted_makespan_s, 18.0);
  EXPECT_DOUBLE_EQ(r.lower_bound_s, 15.0);  // still plan 0's bound
  const std::string s = saturn::report::render_status(r);
  EXPECT_NE(s.find("predicted (plan 1) 18.0s"), std::string::npos) << s;
  const std::string html = saturn::report::render_html(r);
  EXPECT_NE(html.find(R"(<div class="n">plan 1</div>)"), std::string::npos);  // the card's note
}

TEST_F(ReportTest, EndedRunIsFinishedWithMakespan) {
  std::ofstream(dir / "timeline.jsonl", std::ios::app)
      << R"({"event":"job_end","job":"b","step":10,"segment":0,"val_loss":2.5,"t":14.0})"
      << "\n"
      << R"({"event":"run_end","exit_code":1,"t":14.1})"
      << "\n";
  const RunData r = read_run(dir);
  EXPECT_TRUE(r.ended);
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_DOUBLE_EQ(r.makespan_s, 14.1);
  EXPECT_EQ(job(r, "b").status, "finished");
  EXPECT_EQ(job(r, "b").steps_done, 10);
  EXPECT_DOUBLE_EQ(r.eta_s, 0);
  const std::string s = saturn::report::render_status(r);
  EXPECT_NE(s.find("ended with failed jobs (exit 1)"), std::string::npos) << s;
  EXPECT_NE(s.find("makespan 14.1s"), std::string::npos) << s;
  EXPECT_EQ(saturn::report::render_html(r).find("marker now"), std::string::npos);
}

TEST_F(ReportTest, RunStoppedWithWorkLeftHasNoMakespanYet) {
  // Only run 1: it ended by the signal, exit 99, b checkpointed at step 7.
  std::ifstream in(dir / "timeline.jsonl");
  std::string line, kept;
  for (int n = 0; n < 12 && std::getline(in, line); ++n) kept += line + "\n";
  in.close();
  write(dir / "timeline.jsonl", kept);
  fs::remove(dir / "plans/plan-002.json");
  const RunData r = read_run(dir);
  EXPECT_TRUE(r.ended);
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.exit_code, 99);
  EXPECT_EQ(job(r, "b").status, "stopped");
  const std::string s = saturn::report::render_status(r);
  EXPECT_NE(s.find("stopped with work left (exit 99)"), std::string::npos) << s;
  EXPECT_NE(s.find("--resume"), std::string::npos) << s;
  EXPECT_NE(s.find("\nelapsed 12.6s"), std::string::npos) << s;
  EXPECT_EQ(s.find("actual vs predicted"), std::string::npos) << s;
  const std::string html = saturn::report::render_html(r);
  EXPECT_NE(html.find("work left: resume the run"), std::string::npos);
  EXPECT_EQ(html.find(">makespan<"), std::string::npos);
}

TEST_F(ReportTest, SegmentOfAKilledRunIsLostAtItsLastMetrics) {
  // Run 2 was killed (no run_end); run 3 has made its plan: b's open segment was lost where its
  // metrics stopped (12.7 + 1.0, step 9).
  std::ofstream(dir / "timeline.jsonl", std::ios::app)
      << R"({"event":"plan","plan":3,"reason":"initial","makespan_s":20,"lower_bound_s":16,"t":15.0})"
      << "\n";
  RunData r = read_run(dir);
  const auto* b = &job(r, "b");
  ASSERT_EQ(b->segments.size(), 3u);
  EXPECT_EQ(b->segments[2].end, "lost");
  EXPECT_DOUBLE_EQ(b->segments[2].end_s, 13.7);
  EXPECT_EQ(b->segments[2].end_step, 9);
  EXPECT_EQ(b->status, "interrupted");
  EXPECT_EQ(r.runs, 3);
  // b starts again from its checkpoint at step 7: the lines after step 7 are the new segment's
  // (the trainer rewrites them), so the lost segment is known to have reached step 7 only.
  std::ofstream(dir / "timeline.jsonl", std::ios::app)
      << R"({"event":"job_start","job":"b","strategy":"ddp","knobs":[],"devices":1,"ranks":[1],"step":7,"segment":0,"t":15.1})"
      << "\n";
  r = read_run(dir);
  b = &job(r, "b");
  ASSERT_EQ(b->segments.size(), 4u);
  EXPECT_EQ(b->segments[2].end, "lost");
  EXPECT_DOUBLE_EQ(b->segments[2].end_s, 12.7);
  EXPECT_EQ(b->segments[2].end_step, 7);
  EXPECT_EQ(b->segments[3].end, "running");
  EXPECT_DOUBLE_EQ(b->segments[3].end_s, 15.1 + 1.0);
  EXPECT_EQ(b->status, "running");
}

TEST_F(ReportTest, RunAfterAKillContinuesTheClockWhereTheKilledRunGot) {
  // Run 2 (started at 12.6) was killed outright: run_state.json still said 12.6, so run 3's
  // clock restarts there. Its events move to where run 2's segment got (13.7 by b's metrics).
  write(dir / "plans/plan-003.json",
        plan_json(12.65, 15.0, 2, "initial", pjob("b", "ddp", "[1]", 12.65, 15.0)));
  std::ofstream(dir / "timeline.jsonl", std::ios::app)
      << R"({"event":"plan","plan":3,"reason":"initial","makespan_s":15,"lower_bound_s":14.6,"t":12.6})"
      << "\n"
      << R"({"event":"signal","signal":15,"t":12.8})"
      << "\n";
  const RunData r = read_run(dir);
  const auto& b = job(r, "b");
  ASSERT_EQ(b.segments.size(), 3u);
  EXPECT_EQ(b.segments[2].end, "lost");
  EXPECT_DOUBLE_EQ(b.segments[2].end_s, 13.7);
  ASSERT_EQ(r.plans.size(), 4u);
  EXPECT_NEAR(r.plans[3].created_s, 12.65 + 1.1, 1e-9);
  EXPECT_NEAR(r.plans[3].jobs[0].end_s, 15.0 + 1.1, 1e-9);
  EXPECT_NEAR(r.plans[2].valid_until_s, 12.65 + 1.1, 1e-9);
  EXPECT_DOUBLE_EQ(r.plans[1].created_s, 5.0);  // earlier runs keep their times
  ASSERT_GE(r.markers.size(), 2u);
  const auto& resumed = r.markers[r.markers.size() - 2];
  EXPECT_EQ(resumed.kind, "resume");
  EXPECT_DOUBLE_EQ(resumed.t, 13.7);                  // where the killed run's segment got
  EXPECT_NEAR(r.markers.back().t, 12.8 + 1.1, 1e-9);  // the run's later events move with it
}

TEST_F(ReportTest, RunStillProfilingHasNoTimeline) {
  fs::remove(dir / "timeline.jsonl");
  fs::remove_all(dir / "plans");
  fs::remove_all(dir / "jobs");
  const RunData r = read_run(dir);
  EXPECT_FALSE(r.started);
  for (const auto& j : r.jobs) EXPECT_EQ(j.status, "pending");
  EXPECT_NE(saturn::report::render_status(r).find("starting: profiling and planning"),
            std::string::npos);
  EXPECT_NE(saturn::report::render_html(r).find("id=\"no-curves\""), std::string::npos);
}

TEST_F(ReportTest, ErrorsNameTheFileAndWhatIsWrong) {
  EXPECT_NE(error_of(dir / "nope").find("no such run directory"), std::string::npos);
  EXPECT_NE(error_of(dir / "workload.yaml").find("not a directory"), std::string::npos);

  write(dir / "plans/plan-001.json", "{\"version\":1,");
  std::string e = error_of(dir);
  EXPECT_NE(e.find("plan-001.json: not valid JSON"), std::string::npos) << e;
  write(dir / "plans/plan-001.json", plan_json(5, 18, 10, "x", pjob("a", "ddp", "\"0\"", 5, 10)));
  e = error_of(dir);
  EXPECT_NE(e.find("plan-001.json: jobs[0].ranks"), std::string::npos) << e;
  fs::remove(dir / "plans/plan-001.json");

  // A broken line that is not the last one is damage, not a write in progress.
  write(dir / "jobs/a/metrics.jsonl", metric(1, 5, 1) + "{\"step\":2,\"lo\n" + metric(3, 4, 3));
  e = error_of(dir);
  EXPECT_NE(e.find("jobs/a/metrics.jsonl:2: not valid JSON"), std::string::npos) << e;
  write(dir / "jobs/a/metrics.jsonl", metric(1, 5, 1) + "{\"loss\":3}\n");
  e = error_of(dir);
  EXPECT_NE(e.find("metrics.jsonl:2: step: missing"), std::string::npos) << e;
  fs::remove(dir / "jobs/a/metrics.jsonl");

  std::ofstream(dir / "timeline.jsonl", std::ios::app)
      << R"({"event":"job_start","job":"zz","strategy":"ddp","ranks":[0],"step":0,"t":13})"
      << "\n";
  e = error_of(dir);
  EXPECT_NE(e.find("timeline.jsonl:15: job 'zz' is not a job of"), std::string::npos) << e;

  fs::remove(dir / "workload.yaml");
  e = error_of(dir);
  EXPECT_NE(e.find("workload.yaml: missing"), std::string::npos) << e;
}

TEST(Jsonl, LastLineWithoutNewlineOrUnparsableIsIgnored) {
  const fs::path f = fs::temp_directory_path() / "saturn-report-jsonl-test.jsonl";
  write(f, "{\"a\":1}\n\n{\"a\":2}\n{\"a\":3}");
  auto lines = saturn::report::read_jsonl(f);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].line, 3);
  EXPECT_EQ(lines[1].value["a"], 2);
  write(f, "{\"a\":1}\n{\"a\":\n");
  EXPECT_EQ(saturn::report::read_jsonl(f).size(), 1u);
  write(f, "[1,2]\n{\"a\":1}\n");
  EXPECT_THROW(saturn::report::read_jsonl(f), InputError);
  fs::remove(f);
}
