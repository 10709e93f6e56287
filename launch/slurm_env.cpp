#include "launch/slurm_env.hpp"

#include <fmt/format.h>

#include <charconv>
#include <limits>

#include "launch/hostlist.hpp"
#include "runtime/core/error.hpp"

extern char** environ;

namespace saturn::launch {
namespace {

int parse_count(std::string_view text, std::string_view what) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end || v < 0)
    throw InputError(fmt::format("{}=\"{}\": expected a non-negative integer", what, text));
  return v;
}

// An integer variable, or `fallback` when unset.
int int_var(const Environment& env, std::string_view name, int fallback) {
  const std::string* v = env_get(env, name);
  return v ? parse_count(*v, name) : fallback;
}

std::string str_var(const Environment& env, std::string_view name) {
  const std::string* v = env_get(env, name);
  return v ? *v : std::string();
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  std::size_t pos = 0;
  while (true) {
    const std::size_t next = text.find(sep, pos);
    out.push_back(text.substr(pos, next == text.npos ? text.npos : next - pos));
    if (next == text.npos) return out;
    pos = next + 1;
  }
}

void check_per_node(const std::vector<int>& counts, int num_nodes, std::string_view what,
                    std::string_view value) {
  if (!counts.empty() && num_nodes > 0 && counts.size() != static_cast<std::size_t>(num_nodes))
    throw InputError(fmt::format("{}=\"{}\" describes {} node(s) but the job has {}", what, value,
                                 counts.size(), num_nodes));
}

}  // namespace

Environment current_environment() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const std::size_t eq = kv.find('=');
    if (eq == kv.npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

const std::string* env_get(const Environment& env, std::string_view name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

std::vector<int> expand_per_node_counts(std::string_view text, std::string_view what) {
  std::vector<int> out;
  if (text.empty()) throw InputError(fmt::format("{} is empty", what));
  for (std::string_view item : split(text, ',')) {
    int repeat = 1;
    std::string_view count = item;
    const std::size_t paren = item.find('(');
    if (paren != item.npos) {
      // "N(xM)": N on each of M nodes.
      if (item.size() < paren + 4 || item.substr(paren, 2) != "(x" || item.back() != ')')
        throw InputError(fmt::format("{}=\"{}\": \"{}\" is not N or N(xM)", what, text, item));
      count = item.substr(0, paren);
      repeat = parse_count(item.substr(paren + 2, item.size() - paren - 3), what);
      if (repeat == 0)
        throw InputError(fmt::format("{}=\"{}\": \"{}\" repeats zero times", what, text, item));
    }
    const int n = parse_count(count, what);
    if (out.size() + static_cast<std::size_t>(repeat) > kMaxHostlistSize)
      throw InputError(fmt::format("{}=\"{}\": more than {} nodes", what, text, kMaxHostlistSize));
    out.insert(out.end(), static_cast<std::size_t>(repeat), n);
  }
  return out;
}

GpuCount parse_gpu_count(std::string_view text, std::string_view what) {
  GpuCount total;
  const std::vector<std::string_view> items = split(text, ',');
  for (std::string_view item : items) {
    // [gpu:][type:]count; the count is the last field.
    const std::vector<std::string_view> fields = split(item, ':');
    if (fields.size() > 3 || (fields.size() == 3 && fields[0] != "gpu"))
      throw InputError(fmt::format("{}=\"{}\": \"{}\" is not COUNT, TYPE:COUNT or gpu:TYPE:COUNT",
                                   what, text, item));
    const int n = parse_count(fields.back(), what);
    if (n > std::numeric_limits<int>::max() - total.count)
      throw InputError(fmt::format("{}=\"{}\": too many GPUs", what, text));
    total.count += n;
    std::string_view type = fields.size() >= 2 ? fields[fields.size() - 2] : std::string_view();
    if (type == "gpu") type = {};
    if (items.size() == 1) total.type = std::string(type);
  }
  return total;
}

SlurmEnv parse_slurm_env(const Environment& env) {
  SlurmEnv s;
  s.job_id = str_var(env, "SLURM_JOB_ID");
  if (s.job_id.empty()) s.job_id = str_var(env, "SLURM_JOBID");
  s.in_allocation = !s.job_id.empty();
  s.in_step = env_get(env, "SLURM_STEP_ID") != nullptr || env_get(env, "SLURM_STEPID") != nullptr;
  s.job_name = str_var(env, "SLURM_JOB_NAME");
  s.partition = str_var(env, "SLURM_JOB_PARTITION");
  s.submit_dir = str_var(env, "SLURM_SUBMIT_DIR");
  s.restart_count = int_var(env, "SLURM_RESTART_COUNT", 0);
  s.procid = int_var(env, "SLURM_PROCID", -1);
  s.localid = int_var(env, "SLURM_LOCALID", -1);
  s.nodeid = int_var(env, "SLURM_NODEID", -1);
  s.cpus_per_task = int_var(env, "SLURM_CPUS_PER_TASK", -1);
  s.ntasks = int_var(env, "SLURM_NTASKS", int_var(env, "SLURM_NPROCS", -1));

  s.nodelist = str_var(env, "SLURM_JOB_NODELIST");
  if (s.nodelist.empty()) s.nodelist = str_var(env, "SLURM_NODELIST");
  if (!s.nodelist.empty()) {
    try {
      s.nodes = expand_hostlist(s.nodelist);
    } catch (const InputError& e) {
      throw InputError(fmt::format("SLURM_JOB_NODELIST: {}", e.what()));
    }
  }
  s.num_nodes = int_var(env, "SLURM_JOB_NUM_NODES",
                        int_var(env, "SLURM_NNODES", static_cast<int>(s.nodes.size())));
  if (!s.nodes.empty() && s.nodes.size() != static_cast<std::size_t>(s.num_nodes))
    throw InputError(
        fmt::format("SLURM_JOB_NODELIST=\"{}\" names {} node(s) but "
                    "SLURM_JOB_NUM_NODES says {}",
                    s.nodelist, s.nodes.size(), s.num_nodes));

  if (const std::string* v = env_get(env, "SLURM_JOB_CPUS_PER_NODE")) {
    s.cpus_per_node = expand_per_node_counts(*v, "SLURM_JOB_CPUS_PER_NODE");
    check_per_node(s.cpus_per_node, s.num_nodes, "SLURM_JOB_CPUS_PER_NODE", *v);
  }
  if (const std::string* v = env_get(env, "SLURM_TASKS_PER_NODE")) {
    s.tasks_per_node = expand_per_node_counts(*v, "SLURM_TASKS_PER_NODE");
    // Inside an srun step this variable describes the step, which may span fewer nodes.
    if (!s.in_step) check_per_node(s.tasks_per_node, s.num_nodes, "SLURM_TASKS_PER_NODE", *v);
  }

  s.gpus_on_node = int_var(env, "SLURM_GPUS_ON_NODE", -1);
  if (const std::string* v = env_get(env, "SLURM_GPUS_PER_NODE")) {
    const GpuCount g = parse_gpu_count(*v, "SLURM_GPUS_PER_NODE");
    s.gpus_per_node = g.count;
    s.gpu_type = g.type;
  }
  if (const std::string* v = env_get(env, "SLURM_JOB_GPUS"); v != nullptr && !v->empty())
    for (std::string_view id : split(*v, ',')) s.job_gpus.emplace_back(id);

  if (const std::string* v = env_get(env, "SLURM_ARRAY_JOB_ID")) {
    SlurmArray a;
    a.job_id = *v;
    a.task_id = int_var(env, "SLURM_ARRAY_TASK_ID", 0);
    a.task_count = int_var(env, "SLURM_ARRAY_TASK_COUNT", 0);
    a.task_min = int_var(env, "SLURM_ARRAY_TASK_MIN", a.task_id);
    a.task_max = int_var(env, "SLURM_ARRAY_TASK_MAX", a.task_id);
    s.array = a;
  }
  return s;
}

}  // namespace saturn::launch
