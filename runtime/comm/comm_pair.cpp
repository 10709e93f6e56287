#include "runtime/comm/comm_pair.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/backend/cuda_provider.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/comm/staged_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace saturn::comm {

DataCommChoice data_comm_choice_from_env() {
  const char* v = std::getenv("SATURN_DATA_COMM");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "auto") == 0) return DataCommChoice::kAuto;
  if (std::strcmp(v, "nccl") == 0) return DataCommChoice::kNccl;
  if (std::strcmp(v, "staged") == 0) return DataCommChoice::kStaged;
  throw InputError(fmt::format("SATURN_DATA_COMM='{}': expected auto, nccl or staged", v));
}

namespace {

// "host/gpu" of this rank, gathered from every rank of `control` (collective).
std::vector<std::string> gather_gpus(Communicator& control, const std::string& mine) {
  constexpr std::size_t kWords = 64;  // 256 bytes per rank
  std::array<std::int32_t, kWords> local{};
  std::memcpy(local.data(), mine.data(), std::min(mine.size(), kWords * 4 - 1));
  std::vector<std::int32_t> all(kWords * static_cast<std::size_t>(control.size()));
  control.all_gather(local.data(), all.data(), kWords);
  std::vector<std::string> out;
  for (int r = 0; r < control.size(); ++r) {
    const char* p =
        reinterpret_cast<const char*>(all.data() + kWords * static_cast<std::size_t>(r));
    out.emplace_back(p, strnlen(p, kWords * 4));
  }
  return out;
}

// Why NCCL cannot be this job's data communicator; empty when it can. Collective over control.
std::string why_not_nccl(Communicator& control, Device& device) {
  const CudaNccl* nccl = cuda_provider().nccl;
  if (nccl == nullptr || nccl->gpu_id == nullptr || nccl->make_communicator == nullptr)
    return fmt::format("this build's CUDA provider ({}) has no NCCL", cuda_provider().name);
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown-host");
  // A rank that cannot read its GPU's id still takes part in the gather (the others would wait
  // for it forever), with its reason in place of the id.
  constexpr const char* kFailed = "!";
  std::string mine;
  try {
    mine = fmt::format("{} gpu {}", host, nccl->gpu_id(device));
  } catch (const std::exception& e) {
    mine = std::string(kFailed) + e.what();
  }
  const auto gpus = gather_gpus(control, mine);
  for (std::size_t a = 0; a < gpus.size(); ++a)
    if (gpus[a].rfind(kFailed, 0) == 0)
      return fmt::format("rank {} cannot read its GPU's PCI bus id ({})", a, gpus[a].substr(1));
  for (std::size_t a = 0; a < gpus.size(); ++a)
    for (std::size_t b = a + 1; b < gpus.size(); ++b)
      if (gpus[a] == gpus[b])
        return fmt::format("ranks {} and {} share one GPU ({}), and NCCL needs one GPU per rank", a,
                           b, gpus[a]);
  return "";
}

// The data communicator of a CUDA job: NCCL when the build has it and every rank has its own
// GPU, else MPI staged through host memory; SATURN_DATA_COMM overrides. The choice and its
// reason are logged once (rank 0 of the job).
std::unique_ptr<Communicator> device_data_communicator(MpiCommunicator& control, Device& device) {
  const DataCommChoice choice = data_comm_choice_from_env();
  std::string why_not =
      choice == DataCommChoice::kStaged ? "SATURN_DATA_COMM=staged" : why_not_nccl(control, device);
  if (choice == DataCommChoice::kNccl && !why_not.empty())
    throw InputError(
        fmt::format("SATURN_DATA_COMM=nccl, but NCCL cannot be the data "
                    "communicator of these {} ranks: {}",
                    control.size(), why_not));
  std::unique_ptr<Communicator> data;
  if (why_not.empty()) {
    data = cuda_provider().nccl->make_communicator(control.duplicate(), device);
    if (control.rank() == 0)
      log::info(
          "data communicator of {} rank(s): NCCL ({})", control.size(),
          choice == DataCommChoice::kNccl ? "SATURN_DATA_COMM=nccl" : "every rank has its own GPU");
  } else {
    data = std::make_unique<StagedCommunicator>(device, control.duplicate());
    if (control.rank() == 0)
      log::info("data communicator of {} rank(s): MPI staged through host memory ({})",
                control.size(), why_not);
  }
  return data;
}

}  // namespace

CommPair::CommPair(std::unique_ptr<Communicator> control, std::unique_ptr<Communicator> data)
    : owned_control_(std::move(control)),
      owned_data_(std::move(data)),
      control_(owned_control_.get()),
      data_(owned_data_.get()) {
  if (control_ == nullptr || data_ == nullptr) throw Error("CommPair needs two communicators");
  if (control_->size() != data_->size() || control_->rank() != data_->rank())
    throw Error("CommPair: the control and data communicators span different ranks");
}

CommPair::CommPair(Communicator& control, Communicator& data) : control_(&control), data_(&data) {
  if (control_->size() != data_->size() || control_->rank() != data_->rank())
    throw Error("CommPair: the control and data communicators span different ranks");
}

CommPair::CommPair(Communicator& control, std::unique_ptr<Communicator> data)
    : owned_data_(std::move(data)), control_(&control), data_(owned_data_.get()) {
  if (data_ == nullptr) throw Error("CommPair needs a data communicator");
  if (control_->size() != data_->size() || control_->rank() != data_->rank())
    throw Error("CommPair: the control and data communicators span different ranks");
}

std::unique_ptr<CommPair> CommPair::split(int color, int key) {
  auto c = control_->split(color, key);
  auto d = data_ == control_ ? nullptr : data_->split(color, key);
  if (!c) return nullptr;
  if (data_ == control_) {
    // One object for both (a one-rank CPU job): keep it one.
    auto* raw = c.get();
    auto pair = std::make_unique<CommPair>(*raw, *raw);
    pair->owned_control_ = std::move(c);
    return pair;
  }
  return std::make_unique<CommPair>(std::move(c), std::move(d));
}

std::unique_ptr<CommPair> make_comm_pair(Communicator& control, Device& device) {
  std::unique_ptr<Communicator> data;
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&control)) {
    // Its own MPI context: data traffic never matches control traffic.
    if (device.memory().host_accessible()) {
      data = mpi->duplicate();
    } else {
      data = device_data_communicator(*mpi, device);
    }
  } else if (control.size() == 1) {
    data = std::make_unique<SelfCommunicator>(&device);
  } else {
    throw Error("make_comm_pair: a multi-rank control communicator that is not MPI");
  }
  return std::make_unique<CommPair>(control, std::move(data));
}

}  // namespace saturn::comm
