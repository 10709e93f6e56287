// `saturn ckpt inspect FILE` and `saturn ckpt export FILE --format safetensors -o OUT`: look into
// a checkpoint and convert its weights, on one process.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/mpi_env.hpp"
#include "runtime/checkpoint/tools.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/workload/config_json.hpp"

namespace saturn::cli {
namespace {

struct CkptArgs {
  std::string file;
  bool json = false;
  bool no_verify = false;
  std::string format = "safetensors";
  std::string output;
};

int run_inspect(const CkptArgs& a) {
  const ckpt::MpiGuard mpi;
  const ckpt::CheckpointInfo info = ckpt::inspect_checkpoint(a.file, !a.no_verify);
  // step, tokens_seen and data_position must agree as a resume checks them (without the data,
  // whose epoch length is not in the file, as far as the position alone tells).
  const std::string inconsistent = ckpt::check_consistency(info.meta);
  if (a.json) {
    const auto& m = info.meta;
    nlohmann::json j = {{"file", a.file},
                        {"format", ckpt::kFormat},
                        {"version", ckpt::kVersion},
                        {"job_id", m.job_id},
                        {"step", m.step},
                        {"tokens_seen", m.tokens_seen},
                        {"strategy", m.strategy},
                        {"devices", m.devices},
                        {"data_position", m.data_position},
                        {"rng_state", m.rng_state},
                        {"created_utc", m.created_utc},
                        {"model_config", to_json(m.model)},
                        {"train_config", to_json(m.train)},
                        {"checksums_ok", info.all_ok()},
                        {"meta_verified", m.meta_verified},
                        {"consistent", inconsistent.empty()}};
    if (!inconsistent.empty()) j["inconsistency"] = inconsistent;
    if (m.schedule_step >= 0) j["schedule_step"] = m.schedule_step;
    for (const auto& d : info.datasets) {
      nlohmann::json e = {{"path", d.path},
                          {"shape", d.shape},
                          {"checksum", ckpt::format_checksum(d.stored_checksum)}};
      if (d.verified) e["ok"] = d.ok;
      j["datasets"].push_back(e);
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", ckpt::format_inspection(a.file, info).c_str());
  }
  return info.all_ok() && inconsistent.empty() ? kExitOk : kExitFailure;
}

int run_export(const CkptArgs& a) {
  if (a.format != "safetensors")
    throw InputError(fmt::format("--format {}: the only export format is safetensors", a.format));
  const ckpt::MpiGuard mpi;
  const std::size_t n = ckpt::export_safetensors(a.file, a.output);
  log::info("wrote {} tensors to {}", n, a.output);
  return kExitOk;
}

}  // namespace

void add_ckpt_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<CkptArgs>();
  CLI::App* cmd = root.add_subcommand("ckpt", "Inspect or export a checkpoint file (HDF5).");
  cmd->require_subcommand(1);

  CLI::App* inspect = cmd->add_subcommand(
      "inspect",
      "Step, job, strategy, tensors with shapes and sizes, whether every checksum matches and "
      "whether step, tokens_seen and data_position agree (exit 1 when not)");
  inspect->add_option("file", args->file, "Checkpoint file (.h5)")
      ->required()
      ->check(CLI::ExistingFile);
  inspect->add_flag("--json", args->json, "Print JSON instead of text");
  inspect->add_flag("--no-verify", args->no_verify, "Skip recomputing the checksums");
  inspect->callback([args, action] { *action = [args] { return run_inspect(*args); }; });

  CLI::App* exp = cmd->add_subcommand(
      "export", "Write the model weights in another format (safetensors), names as in the file");
  exp->add_option("file", args->file, "Checkpoint file (.h5)")
      ->required()
      ->check(CLI::ExistingFile);
  exp->add_option("--format", args->format, "Output format")->check(CLI::IsMember({"safetensors"}));
  exp->add_option("-o,--output", args->output, "Output file")->required();
  exp->callback([args, action] { *action = [args] { return run_export(*args); }; });
}

}  // namespace saturn::cli
