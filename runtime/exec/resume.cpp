#include "runtime/exec/resume.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/store.hpp"
#include "runtime/core/byte_hash.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/exec/early_stop.hpp"
#include "runtime/exec/selection.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/workload/run_workload.hpp"

namespace saturn::exec {

namespace fs = std::filesystem;

namespace {

// The absolute `from` directories a run recorded (run_state.json "model_dirs"), by model name.
std::map<std::string, fs::path> recorded_model_dirs(const nlohmann::json& state) {
  std::map<std::string, fs::path> dirs;
  const auto it = state.find("model_dirs");
  if (it == state.end() || !it->is_object()) return dirs;
  for (const auto& [model, dir] : it->items())
    if (dir.is_string()) dirs[model] = dir.get<std::string>();
  return dirs;
}

// The root attributes of a checkpoint, or nullopt when it cannot be read (a corrupt newest
// checkpoint is the loader's to skip, with its warning). Rank 0 alone, on MPI_COMM_SELF.
std::optional<ckpt::CheckpointMeta> meta_of(const fs::path& file) {
  try {
    return ckpt::read_meta(MPI_COMM_SELF, file);
  } catch (const ckpt::CheckpointError&) {
    return std::nullopt;
  }
}

}  // namespace

std::optional<RecordedRun> read_recorded_run(const fs::path& run_dir) {
  std::optional<nlohmann::json> state = RunDir(run_dir).read_run_state();
  if (!state || state->is_discarded() || !state->contains("train_data")) return std::nullopt;
  RecordedRun r;
  r.train_data = (*state)["train_data"].get<std::string>();
  r.val_data = (*state)["val_data"].get<std::string>();
  r.model_dirs = recorded_model_dirs(*state);
  r.state = std::move(*state);
  return r;
}

ResumeState read_resume_state(const Workload& w, const fs::path& run_dir) {
  ResumeState s;
  for (const auto& job : w.jobs) {
    const fs::path job_dir = RunDir(run_dir).job_dir(job.id);
    const bool done = fs::exists(ckpt::final_path(job_dir));
    std::int64_t step = 0;
    if (done) {
      step = job.train.steps;
    } else {
      for (const auto& f : ckpt::list_checkpoints(job_dir))
        if (auto n = ckpt::parse_step_file_name(f.filename().string())) step = std::max(step, *n);
    }
    s.finished.push_back(done);
    s.steps_done.push_back(step);
  }
  const fs::path state_file = RunDir(run_dir).run_state_file();
  if (const auto state = RunDir(run_dir).read_run_state()) {
    const nlohmann::json& j = *state;
    // Without its selection state a resumed run would decide its rungs again, differently.
    if (w.selection.enabled() && j.is_discarded())
      throw InputError(fmt::format(
          "--resume: {} is not valid JSON: the selection decisions it holds cannot be restored",
          state_file.string()));
    if (!j.is_discarded()) {
      s.elapsed_s = j.value("elapsed_s", 0.0);
      s.next_plan = j.value("next_plan", 0);
      if (j.contains("selection") && w.selection.enabled()) {
        s.selection = j["selection"];
        // Checked here, with the input (exit 2 naming the file and the field), not when the
        // coordinator restores it (its errors end the MPI job).
        std::vector<std::string> ids;
        for (const auto& job : w.jobs) ids.push_back(job.id);
        Selection restored(w.selection, ids);
        restored.restore(s.selection, state_file.string());
        s.settled.resize(w.jobs.size());
        for (std::size_t k = 0; k < w.jobs.size(); ++k)
          s.settled[k] =
              restored.stopped(static_cast<int>(k)) || restored.withdrawn(static_cast<int>(k));
      }
      if (j.contains("early_stopped")) {
        // Checked like the selection state: a malformed entry is exit 2, file and field.
        const nlohmann::json& es = j["early_stopped"];
        if (!es.is_object())
          throw InputError(
              fmt::format("--resume: {}: early_stopped must be an object (job id: "
                          "the early_stop that stopped it), found {}",
                          state_file.string(), es.dump()));
        for (const auto& [id, hit] : es.items()) {
          const bool known = std::any_of(w.jobs.begin(), w.jobs.end(),
                                         [&](const JobSpec& job) { return job.id == id; });
          if (!known)
            throw InputError(
                fmt::format("--resume: {}: early_stopped.{}: the workload has no job '{}' any more",
                            state_file.string(), id, id));
          try {
            const EarlyStopHit h = EarlyStopHit::from_json(hit);
            if (h.rule != "diverged" && h.rule != "patience")
              throw InputError("rule must be diverged or patience");
          } catch (const std::exception& e) {
            throw InputError(fmt::format(
                "--resume: {}: early_stopped.{} is malformed ({}): expected {{rule: diverged | "
                "patience, step, metric, value, reference}}, found {}",
                state_file.string(), id, e.what(), hit.dump()));
          }
        }
        s.early_stopped = es;
      }
      if (j.contains("cancelled") && j["cancelled"].is_array())
        for (const auto& id : j["cancelled"])
          if (id.is_string()) s.cancelled.push_back(id.get<std::string>());
    }
  }
  s.settled.resize(w.jobs.size());
  for (std::size_t k = 0; k < w.jobs.size(); ++k) {
    const std::string& id = w.jobs[k].id;
    if ((s.early_stopped.is_object() && s.early_stopped.contains(id)) ||
        std::find(s.cancelled.begin(), s.cancelled.end(), id) != s.cancelled.end())
      s.settled[k] = true;
  }
  return s;
}

// --resume: a job whose checkpoints are another job's, or past its steps, cannot continue from
// them; the resume is refused before any rank trains (it used to "finish" such a job with steps
// that never ran and no final.h5).
void check_resumable(const Workload& w, const fs::path& run_dir) {
  for (const auto& job : w.jobs) {
    const fs::path job_dir = RunDir(run_dir).job_dir(job.id);
    const std::int64_t steps = job.train.steps;
    const fs::path final = ckpt::final_path(job_dir);
    if (fs::exists(final)) {
      const auto m = meta_of(final);
      if (m && m->job_id != job.id)
        throw InputError(fmt::format("--resume: {} belongs to job '{}', not to job '{}'",
                                     final.string(), m->job_id, job.id));
      if (m && m->step != steps)
        throw InputError(fmt::format(
            "--resume: job {} finished at step {} ({}), but the workload now gives it {} steps; "
            "restore steps: {}, or move {} away to continue the job from its newest checkpoint",
            job.id, m->step, final.string(), steps, m->step, final.filename().string()));
      continue;
    }
    const auto files = ckpt::list_checkpoints(job_dir);
    if (files.empty()) continue;
    const auto step = ckpt::parse_step_file_name(files.front().filename().string());
    if (step && *step > steps)
      throw InputError(fmt::format(
          "--resume: job {}'s newest checkpoint {} is at step {}, past the job's {} steps (were "
          "the workload's steps lowered?); give it at least {} steps, or move {} away to train "
          "it from scratch",
          job.id, files.front().string(), *step, steps, *step,
          ckpt::checkpoints_dir(job_dir).string()));
    const auto m = meta_of(files.front());
    if (m && m->job_id != job.id)
      throw InputError(fmt::format(
          "--resume: {} belongs to job '{}', not to job '{}' (copied from another job's "
          "directory?); move it away to resume the job",
          files.front().string(), m->job_id, job.id));
  }
}

// --resume: the Hugging Face models the run started from (`from:`) must be as they were. A job
// that checkpointed would continue from other weights than it started with, and one that had
// not started would train another model than the batch planned, silently. The directories are
// read whole again (checksums and finite values, hf::scan_model_dir) and compared with what
// run_state.json recorded, before any rank trains. The verified checksums are recorded again.
void check_models_unchanged(const RecordedRun& recorded, const fs::path& run_dir, Workload& w) {
  const fs::path file = RunDir(run_dir).run_state_file();
  const nlohmann::json& state = recorded.state;
  const auto& dirs = recorded.model_dirs;
  const auto it = state.find("model_checksums");
  if (it == state.end() || !it->is_object()) {
    if (!dirs.empty())
      log::warn(
          "--resume: {} records no checksums of the run's `from:` models (written by an older "
          "Saturn): whether they changed since the run started is not checked",
          file.string());
    return;
  }
  for (const auto& [model, sums] : it->items()) {
    const auto dir = dirs.find(model);
    if (dir == dirs.end() || !sums.is_object())
      throw InputError(fmt::format(
          "--resume: {}: model_checksums.{} is malformed (expected file: checksum, for a model "
          "of model_dirs)",
          file.string(), model));
    const std::string where =
        fmt::format("--resume: models.{}.from {}", model, dir->second.string());
    hf::ModelDirChecksums now;
    try {
      now = hf::scan_model_dir(dir->second, hf::read_config(dir->second).model);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", where, e.what()));
    }
    std::map<std::string, std::uint64_t> was;
    for (const auto& [name, sum] : sums.items()) {
      std::uint64_t v = 0;
      if (!sum.is_string() || !parse_hash(sum.get<std::string>(), v))
        throw InputError(
            fmt::format("--resume: {}: model_checksums.{}.{}: expected \"0x...\", got {}",
                        file.string(), model, name, sum.dump()));
      was[name] = v;
    }
    for (const auto& [name, sum] : was) {
      const auto n = now.files.find(name);
      if (n == now.files.end() || n->second != sum)
        throw InputError(fmt::format(
            "{} changed since the run started: {} {} (recorded {}); its jobs would continue from "
            "other weights than they started with, or train another model than the batch "
            "planned (valid: restore the directory as it was, or start a new run with another "
            "--run-dir)",
            where, name,
            n == now.files.end() ? "is gone" : "has checksum " + format_hash(n->second),
            format_hash(sum)));
    }
    for (const auto& [name, sum] : now.files)
      if (!was.count(name))
        throw InputError(fmt::format(
            "{} changed since the run started: {} is new (valid: restore the directory as it "
            "was, or start a new run with another --run-dir)",
            where, name));
    w.pretrained_checksums[model] = was;
  }
}

// A resumed run is the run its directory holds: RUN_DIR/workload.yaml, the text it started
// with (or that was edited there to change it), is what `saturn status`, `submit`, `cancel` and
// `report` read and what its submitted jobs follow. A WORKLOAD given with --resume (the form a
// `saturn sbatch` requeue uses) must say the same, or the ranks would run another batch than the
// one the run directory describes.
void check_resumes_its_workload(const Workload& w, const fs::path& run_dir) {
  // No copy: no run there yet, refused later ("holds no run").
  if (!run_copy_differs(run_dir, w)) return;
  const fs::path copy = RunDir(run_dir).workload_copy();
  throw InputError(fmt::format(
      "--resume: {} differs from {}, the workload of the run being resumed (was the file edited "
      "since the run started?); a resumed run continues from its run directory's copy: resume "
      "with `saturn run --resume {}`, or, to change the run, edit {} (e.g. copy {} over it) and "
      "resume",
      w.source.string(), copy.string(), run_dir.string(), copy.string(), w.source.string()));
}

}  // namespace saturn::exec
