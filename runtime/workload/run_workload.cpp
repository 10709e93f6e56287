#include "runtime/workload/run_workload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn {

namespace fs = std::filesystem;

fs::path submitted_dir(const fs::path& run_dir) {
  return RunDir(run_dir).submitted_dir();
}

std::string accepted_name(std::size_t order, const std::string& request_name) {
  return fmt::format("{:06}-{}", order, request_name);
}

bool submission_recorded(const fs::path& run_dir, const std::string& request_name) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(submitted_dir(run_dir), ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() == request_name.size() + 7 && n.substr(7) == request_name && n[6] == '-')
      return true;
  }
  return false;
}

void record_accepted_submission(const fs::path& run_dir, const std::string& name,
                                const Submission& submission, const std::vector<std::string>& ids) {
  const fs::path dir = submitted_dir(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  const nlohmann::json j = {
      {"source", submission.source.string()}, {"yaml", submission.yaml}, {"jobs", ids}};
  write_file_atomic(dir / name, j.dump(2), Durability::kFsync);
}

std::vector<Submission> accepted_submissions(const fs::path& run_dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(submitted_dir(run_dir), ec)) {
    const std::string n = e.path().filename().string();
    // NAME.json only: NAME.json.tmp.PID is a write in progress (or one a crash left).
    if (e.is_regular_file() && n.size() > 5 && n.substr(n.size() - 5) == ".json")
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Submission> out;
  for (const auto& f : files) {
    const auto j = nlohmann::json::parse(read_input_file(f), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("source") || !j["source"].is_string() ||
        !j.contains("yaml") || !j["yaml"].is_string())
      throw InputError(fmt::format(
          "{}: not an accepted submission (expected JSON with the strings source and yaml)",
          f.string()));
    out.push_back({j["source"].get<std::string>(), j["yaml"].get<std::string>()});
  }
  return out;
}

bool run_copy_differs(const fs::path& run_dir, const Workload& w) {
  const fs::path copy = RunDir(run_dir).workload_copy();
  std::error_code ec;
  if (!fs::exists(copy, ec)) return false;
  return read_input_file(copy) != w.source_text;
}

Workload load_batch_base(const fs::path& run_dir) {
  LoadOptions lo;
  lo.check_data_files = false;
  const nlohmann::json state = RunDir(run_dir).read_run_state().value_or(nlohmann::json());
  if (state.is_object() && state.contains("model_dirs") && state["model_dirs"].is_object())
    for (const auto& [model, d] : state["model_dirs"].items())
      if (d.is_string()) lo.model_dirs[model] = d.get<std::string>();
  Workload w = load_workload(RunDir(run_dir).workload_copy(), lo);
  if (state.is_object())
    for (auto [key, file] : {std::pair{"train_data", &w.train_data}, {"val_data", &w.val_data}})
      if (state.contains(key) && state[key].is_string()) *file = state[key].get<std::string>();
  return w;
}

Workload load_batch_workload(const fs::path& run_dir) {
  const Workload w = load_batch_base(run_dir);
  const std::vector<Submission> subs = accepted_submissions(run_dir);
  if (subs.empty()) return w;
  LoadOptions none;
  none.check_data_files = false;
  return add_submissions(w, subs, none);
}

}  // namespace saturn
