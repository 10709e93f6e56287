#include "launch/binding.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <numeric>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace saturn::launch {
namespace {

// Set to 1 to let several ranks share a GPU without a code change (e.g. to debug on one GPU).
constexpr const char* kOversubscribeVar = "SATURN_OVERSUBSCRIBE_DEVICES";

std::optional<int> to_int(std::string_view text) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end || v < 0) return std::nullopt;
  return v;
}

int required_int(const Environment& env, std::string_view name) {
  const std::string* v = env_get(env, name);
  const std::optional<int> n = v ? to_int(*v) : std::nullopt;
  if (!n)
    throw InputError(
        fmt::format("{}=\"{}\": expected a non-negative integer", name, v ? *v : std::string()));
  return *n;
}

std::string trim(std::string_view s) {
  const std::size_t b = s.find_first_not_of(" \t");
  if (b == s.npos) return {};
  const std::size_t e = s.find_last_not_of(" \t");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split_ids(std::string_view text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    out.push_back(trim(text.substr(pos, comma - pos)));
    pos = comma + 1;
  }
  return out;
}

// What the CUDA runtime accepts in CUDA_VISIBLE_DEVICES: an index or a (MIG) UUID.
bool valid_cuda_id(const std::string& id) {
  return to_int(id).has_value() || id.starts_with("GPU-") || id.starts_with("MIG-");
}

std::string join_ids(const std::vector<std::string>& ids) {
  return ids.empty() ? std::string("none") : fmt::format("{}", fmt::join(ids, ","));
}

}  // namespace

LocalRank local_rank_from_comm(MPI_Comm comm) {
  int world_rank = 0;
  MPI_Comm_rank(comm, &world_rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  LocalRank lr;
  MPI_Comm_rank(node, &lr.rank);
  MPI_Comm_size(node, &lr.size);
  MPI_Comm_free(&node);
  lr.source = "MPI_COMM_TYPE_SHARED";
  return lr;
}

std::optional<LocalRank> local_rank_from_env(const Environment& env) {
  if (env_get(env, "OMPI_COMM_WORLD_LOCAL_RANK")) {
    LocalRank lr{required_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
                 required_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_RANK"};
    return lr;
  }
  if (env_get(env, "MPI_LOCALRANKID")) {
    LocalRank lr{required_int(env, "MPI_LOCALRANKID"), required_int(env, "MPI_LOCALNRANKS"),
                 "MPI_LOCALRANKID"};
    return lr;
  }
  // SLURM_LOCALID is the task's own only in an srun step that no mpirun sits in: the batch
  // shell and everything mpirun starts inherit SLURM_LOCALID=0.
  const bool srun_task =
      env_get(env, "SLURM_STEP_ID") != nullptr || env_get(env, "SLURM_STEPID") != nullptr;
  if (srun_task && env_get(env, "SLURM_LOCALID") && !env_get(env, "OMPI_COMM_WORLD_SIZE")) {
    LocalRank lr{required_int(env, "SLURM_LOCALID"), 0, "SLURM_LOCALID"};
    // The step's tasks on this node: SLURM_STEP_TASKS_PER_NODE at this node's index.
    const std::string* tpn = env_get(env, "SLURM_STEP_TASKS_PER_NODE");
    if (tpn == nullptr) tpn = env_get(env, "SLURM_TASKS_PER_NODE");
    if (tpn != nullptr && env_get(env, "SLURM_NODEID")) {
      const std::vector<int> counts = expand_per_node_counts(*tpn, "SLURM_STEP_TASKS_PER_NODE");
      const int node = required_int(env, "SLURM_NODEID");
      if (static_cast<std::size_t>(node) < counts.size()) lr.size = counts[node];
    }
    if (lr.size == 0) lr.size = lr.rank + 1;  // unknown: at least this many
    return lr;
  }
  return std::nullopt;
}

VisibleDevices visible_devices(const Environment& env, int physical_count) {
  VisibleDevices out;
  std::vector<std::string> job_gpus;
  if (const std::string* g = env_get(env, "SLURM_JOB_GPUS"); g != nullptr && !g->empty())
    job_gpus = split_ids(*g);

  if (const std::string* cvd = env_get(env, "CUDA_VISIBLE_DEVICES")) {
    out.source = "CUDA_VISIBLE_DEVICES";
    if (trim(*cvd).empty()) return out;
    std::vector<std::string> ids;
    for (std::string& id : split_ids(*cvd)) {
      if (!valid_cuda_id(id)) break;  // CUDA ignores the rest of the list from here on
      ids.push_back(std::move(id));
    }
    // Slurm writes both lists in the same order; other lengths mean another tool narrowed it.
    const bool mapped = job_gpus.size() == ids.size();
    for (std::size_t i = 0; i < ids.size(); ++i)
      out.devices.push_back({static_cast<int>(i), ids[i], mapped ? job_gpus[i] : std::string()});
    return out;
  }
  if (!job_gpus.empty()) {
    out.source = "SLURM_JOB_GPUS";
    for (const auto& id : job_gpus) {
      const std::optional<int> ordinal = to_int(id);
      if (!ordinal) break;
      out.devices.push_back({*ordinal, id, id});
    }
    return out;
  }
  if (physical_count < 0) {
    out.source = "unknown";
    return out;
  }
  out.source = fmt::format("all {} devices", physical_count);
  for (int i = 0; i < physical_count; ++i)
    out.devices.push_back({i, std::to_string(i), std::string()});
  return out;
}

DeviceChoice choose_device(DeviceKind kind, int local_rank,
                           const std::vector<std::vector<std::string>>& node_visible,
                           bool allow_oversubscribe) {
  const int local_size = static_cast<int>(node_visible.size());
  if (local_rank < 0 || local_rank >= local_size)
    throw Error(
        fmt::format("device binding: local rank {} is outside 0..{}", local_rank, local_size - 1));
  if (kind == DeviceKind::kCpu) {
    DeviceChoice c;
    c.device = fmt::format("cpu:{}", local_rank);
    c.ordinal = local_rank;
    c.reason = fmt::format(
        "local rank {} of {} -> {} (CPU backend: binding is a no-op, each rank computes on its "
        "own threads)",
        local_rank, local_size, c.device);
    return c;
  }

  // Every local rank's pick by the round-robin rule, so that sharing across lists shows too.
  std::vector<std::string> picks(node_visible.size());
  for (int r = 0; r < local_size; ++r) {
    const auto& list = node_visible[r];
    if (list.empty()) continue;
    int position = 0;
    for (int q = 0; q < r; ++q) position += node_visible[q] == list ? 1 : 0;
    picks[r] = list[static_cast<std::size_t>(position) % list.size()];
  }
  const auto& mine = node_visible[local_rank];
  if (mine.empty())
    throw InputError(fmt::format(
        "device binding: local rank {} of {} sees no CUDA device (CUDA_VISIBLE_DEVICES empty or "
        "unset and no GPUs found); request GPUs (e.g. sbatch --gpus-per-node) or use --device cpu",
        local_rank, local_size));
  const std::string& id = picks[local_rank];
  int sharers = 0;
  int group = 0;
  for (int r = 0; r < local_size; ++r) {
    sharers += picks[r] == id ? 1 : 0;
    group += node_visible[r] == mine ? 1 : 0;
  }
  if (sharers > 1 && !allow_oversubscribe)
    throw InputError(fmt::format(
        "device binding: {} ranks on this node would share GPU {} ({} local ranks, {} visible "
        "GPU(s) [{}]); start at most one rank per GPU (sbatch --ntasks-per-node equal to "
        "--gpus-per-node, or mpirun -np <= GPUs), or share GPUs on purpose with saturn run "
        "--oversubscribe-devices or {}=1",
        sharers, id, local_size, mine.size(), join_ids(mine), kOversubscribeVar));
  DeviceChoice c;
  c.ordinal = static_cast<int>(std::find(mine.begin(), mine.end(), id) - mine.begin());
  c.id = id;
  c.device = fmt::format("cuda:{}", c.ordinal);
  c.sharers = sharers;
  c.reason = fmt::format(
      "local rank {} of {} -> {} (visible GPU {} of [{}], {} rank(s) share "
      "that list{})",
      local_rank, local_size, c.device, id, join_ids(mine), group,
      sharers > 1 ? fmt::format("; oversubscribed: {} ranks on it", sharers) : std::string());
  return c;
}

DeviceChoice choose_device(DeviceKind kind, int local_rank, int local_size,
                           const std::vector<std::string>& visible, bool allow_oversubscribe) {
  if (local_size < 1) throw Error(fmt::format("device binding: local size {} < 1", local_size));
  return choose_device(kind, local_rank, std::vector<std::vector<std::string>>(local_size, visible),
                       allow_oversubscribe);
}

DeviceChoice bind_device(MPI_Comm comm, const Environment& env, const BindOptions& options) {
  int world_rank = 0;
  MPI_Comm_rank(comm, &world_rank);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);

  // Everything that can throw on one rank only runs inside this try, so all ranks reach the
  // collectives below.
  VisibleDevices vis;
  std::string error;
  try {
    if (options.kind == DeviceKind::kCuda) vis = visible_devices(env, options.physical_count);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::string mine;
  for (const auto& d : vis.devices) mine += d.id + '\n';
  const int my_len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(local_size)), offsets(lens.size());
  MPI_Allgather(&my_len, 1, MPI_INT, lens.data(), 1, MPI_INT, node);
  std::partial_sum(lens.begin(), lens.end() - 1, offsets.begin() + 1);
  std::string all(static_cast<std::size_t>(offsets.back() + lens.back()), '\0');
  MPI_Allgatherv(mine.data(), my_len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                 node);
  MPI_Comm_free(&node);
  std::vector<std::vector<std::string>> node_visible(lens.size());
  for (std::size_t r = 0; r < lens.size(); ++r) {
    const std::string_view part(all.data() + offsets[r], static_cast<std::size_t>(lens[r]));
    std::size_t pos = 0;
    for (std::size_t nl = part.find('\n'); nl != part.npos; nl = part.find('\n', pos)) {
      node_visible[r].emplace_back(part.substr(pos, nl - pos));
      pos = nl + 1;
    }
  }

  const std::string* var = env_get(env, kOversubscribeVar);
  const bool allow = options.allow_oversubscribe || (var != nullptr && *var == "1");
  DeviceChoice choice;
  if (error.empty()) {
    try {
      choice = choose_device(options.kind, local_rank, node_visible, allow);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  const int my_fail = error.empty() ? INT_MAX : world_rank;
  int first_fail = INT_MAX;
  MPI_Allreduce(&my_fail, &first_fail, 1, MPI_INT, MPI_MIN, comm);
  if (first_fail != INT_MAX) {
    // Every rank throws the first failing rank's own message, so whichever rank reports it
    // (rank 0, usually) says what went wrong, not just where.
    int len = world_rank == first_fail ? static_cast<int>(error.size()) : 0;
    MPI_Bcast(&len, 1, MPI_INT, first_fail, comm);
    std::string text =
        world_rank == first_fail ? error : std::string(static_cast<std::size_t>(len), ' ');
    MPI_Bcast(text.data(), len, MPI_CHAR, first_fail, comm);
    int world_size = 1;
    MPI_Comm_size(comm, &world_size);
    if (world_size == 1) throw InputError(text);
    throw InputError(fmt::format("device binding failed on rank {}: {}", first_fail, text));
  }

  std::string extra;
  if (options.kind == DeviceKind::kCuda) {
    const VisibleDevice& d = vis.devices[static_cast<std::size_t>(choice.ordinal)];
    extra = fmt::format(" from {}", vis.source);
    if (d.ordinal != choice.ordinal) {
      // No CUDA_VISIBLE_DEVICES: the CUDA runtime numbers every GPU, so the id is the ordinal.
      choice.ordinal = d.ordinal;
      choice.device = fmt::format("cuda:{}", d.ordinal);
      extra += fmt::format(", CUDA ordinal {}", d.ordinal);
    }
    if (!d.global_id.empty()) extra += fmt::format(", global GPU {} (SLURM_JOB_GPUS)", d.global_id);
  } else {
    // GPUs allocated to a CPU run are worth a word: they idle.
    for (const char* name : {"CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS"})
      if (const std::string* v = env_get(env, name); v != nullptr && !v->empty()) {
        extra = fmt::format("; GPUs {}={} are not used", name, *v);
        break;
      }
  }
  try {
    if (const std::optional<LocalRank> from_env = local_rank_from_env(env);
        from_env && from_env->rank != local_rank)
      log::debug("{}={} differs from the shared-memory local rank {}; using the latter",
                 from_env->source, from_env->rank, local_rank);
  } catch (const InputError&) {
    // Only a hint for the log; the shared-memory rank is the one in use.
  }
  log::info("device: {}{}", choice.reason, extra);
  return choice;
}

}  // namespace saturn::launch
