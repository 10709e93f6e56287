#include "runtime/profile/hardware.hpp"

#include <fmt/format.h>
#include <mpi.h>
#include <omp.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <thread>

#include "runtime/backend/cuda_provider.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/json_fields.hpp"
#include "runtime/core/log.hpp"
#include "runtime/profile/text_comm.hpp"

extern "C" char* openblas_get_corename(void);

namespace saturn::profile {
namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string v = line.substr(colon + 1);
    const auto b = v.find_first_not_of(" \t");
    return b == std::string::npos ? "" : v.substr(b);
  }
  return "unknown";
}

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  // Allowed before MPI_Init (MPI-3), so login-node tools can call it too.
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown";
  std::string s(text, static_cast<std::size_t>(len));
  const auto nl = s.find_first_of(",\n");
  if (nl != std::string::npos) s = s.substr(0, nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string canonical(const Hardware& h) {
  std::string nodes;
  for (int r : h.ranks_per_node) nodes += fmt::format("{}{}", nodes.empty() ? "" : ",", r);
  std::string text = fmt::format("{}|{}|{}|{}|{}|{}|{}", h.device_kind, h.cpu_model, h.cores,
                                 h.threads_per_rank, h.blas, h.mpi, nodes);
  if (h.gpu_count > 0)
    text += fmt::format("|{}|{}|{}|{}|{}", h.gpu_model, h.gpu_count, h.gpu_memory_bytes,
                        h.gpu_driver, h.gpu_runtime);
  return text;
}

}  // namespace

std::string hash_hex(const std::string& text) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

int Hardware::ranks() const {
  int n = 0;
  for (int r : ranks_per_node) n += r;
  return n;
}

std::string Hardware::id() const {
  return hash_hex(canonical(*this));
}

std::string Hardware::describe() const {
  std::string layout;
  bool uniform = true;
  for (int r : ranks_per_node) uniform = uniform && r == ranks_per_node.front();
  if (ranks_per_node.empty()) {
    layout = "no ranks";
  } else if (uniform) {
    layout = fmt::format("{} node{} x {} rank{}", nodes(), nodes() == 1 ? "" : "s",
                         ranks_per_node.front(), ranks_per_node.front() == 1 ? "" : "s");
  } else {
    for (int r : ranks_per_node) layout += fmt::format("{}{}", layout.empty() ? "" : "+", r);
    layout += " ranks";
  }
  const std::string gpus =
      gpu_count > 0
          ? fmt::format(" ({} x {}, {:.1f} GiB each, driver CUDA {}, runtime {})", gpu_count,
                        gpu_model, static_cast<double>(gpu_memory_bytes) / (1024.0 * 1024 * 1024),
                        gpu_driver, gpu_runtime)
          : std::string();
  return fmt::format("{}{}, {} ({} cores), {} thread{}/rank, BLAS {}, {}", device_kind, gpus,
                     cpu_model, cores, threads_per_rank, threads_per_rank == 1 ? "" : "s", blas,
                     layout);
}

namespace {

constexpr auto kFields = std::make_tuple(
    json_fields::field("device_kind", &Hardware::device_kind),
    json_fields::field("cpu_model", &Hardware::cpu_model),
    json_fields::field("cores", &Hardware::cores),
    json_fields::field("threads_per_rank", &Hardware::threads_per_rank),
    json_fields::field("blas", &Hardware::blas), json_fields::field("mpi", &Hardware::mpi),
    json_fields::field("ranks_per_node", &Hardware::ranks_per_node));

// CUDA fingerprints only (and none written before GPU profiling): present when gpu_count > 0.
constexpr auto kGpuFields =
    std::make_tuple(json_fields::field("gpu_model", &Hardware::gpu_model),
                    json_fields::field("gpu_count", &Hardware::gpu_count),
                    json_fields::field("gpu_memory_bytes", &Hardware::gpu_memory_bytes),
                    json_fields::field("gpu_driver", &Hardware::gpu_driver),
                    json_fields::field("gpu_runtime", &Hardware::gpu_runtime));

}  // namespace

nlohmann::json Hardware::to_json() const {
  nlohmann::json j = json_fields::object_of(*this, kFields);
  if (gpu_count > 0) json_fields::write_fields(j, *this, kGpuFields);
  return j;
}

Hardware Hardware::from_json(const nlohmann::json& j) {
  Hardware h;
  try {
    json_fields::read_fields(j, h, kFields, "");
    json_fields::read_value(j, "", "gpu_count", h.gpu_count, false);
    if (h.gpu_count > 0) json_fields::read_fields(j, h, kGpuFields, "");
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("hardware fingerprint: {}", e.what()));
  }
  return h;
}

Hardware detect_local_hardware(int ranks) {
  Hardware h;
  h.cpu_model = cpu_model_name();
  h.cores = static_cast<int>(std::thread::hardware_concurrency());
  h.threads_per_rank = omp_get_max_threads();
  const char* core = openblas_get_corename();
  h.blas = core != nullptr ? core : "unknown";
  h.mpi = mpi_library();
  h.ranks_per_node = {ranks};
  return h;
}

Hardware detect_hardware(comm::Communicator& world, std::vector<int>* node_of_rank,
                         DeviceKind device) {
  Hardware h = detect_local_hardware(1);
  if (device == DeviceKind::kCuda) {
    // Which GPU model the ranks have (rank 0's, broadcast below): profiles measured on one GPU
    // model do not describe another. Read without creating a device, and without throwing
    // (every rank is on its way into the collectives below).
    h.device_kind = fmt::format("{}: {}", cuda_provider().name, cuda_provider().device_name(0));
    CudaDeviceFacts facts;
    std::string why;
    if (cuda_provider().device_facts(0, &facts, &why)) {
      h.gpu_model = facts.name;
      h.gpu_count = facts.count;
      h.gpu_memory_bytes = facts.total_memory;
      h.gpu_driver = cuda_version_text(facts.driver_version);
      h.gpu_runtime = cuda_version_text(facts.runtime_version);
    } else {
      // The trials' make_device fails with the reason; the fingerprint says it too.
      log::warn("hardware fingerprint: the GPU's facts cannot be read: {}", why);
    }
  }
  // Ranks on one node share a host name; group them in order of first appearance.
  const std::vector<std::string> hosts = all_gather_text(world, host_name());
  std::map<std::string, std::size_t> index;
  h.ranks_per_node.clear();
  if (node_of_rank) node_of_rank->clear();
  for (const auto& host : hosts) {
    auto [it, fresh] = index.try_emplace(host, h.ranks_per_node.size());
    if (fresh) h.ranks_per_node.push_back(0);
    ++h.ranks_per_node[it->second];
    if (node_of_rank) node_of_rank->push_back(static_cast<int>(it->second));
  }
  std::string text = h.to_json().dump();
  broadcast_text(world, text, 0);
  return Hardware::from_json(nlohmann::json::parse(text));
}

}  // namespace saturn::profile
