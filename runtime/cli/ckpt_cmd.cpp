// `saturn ckpt inspect FILE`, `saturn ckpt export FILE --format safetensors|hf -o OUT` and
// `saturn ckpt import HF_DIR -o FILE`: look into a checkpoint and convert its weights, to and
// from a Hugging Face model directory (import: on one process, or on N under mpirun, each
// reading and writing 1/N of the model).
#include <fmt/format.h>

#include <mpi.h>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/mpi_env.hpp"
#include "runtime/checkpoint/tools.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
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
  std::string max_shard_size = "5GiB";
  std::string origin;
  bool force = false;
  bool merge = false;
  std::string base;
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
  if (a.format != "safetensors" && a.format != "hf" && a.format != "peft")
    throw InputError(
        fmt::format("--format {}: valid formats are safetensors, hf and peft", a.format));
  const ckpt::MpiGuard mpi;
  if (!a.origin.empty() && a.format != "hf")
    throw InputError("--from is used only with --format hf");
  if ((a.merge || !a.base.empty()) && a.format != "hf")
    throw InputError("--merge and --base are used only with --format hf");
  if (!a.base.empty() && !a.merge) throw InputError("--base is used only with --merge");
  if (a.format == "peft") {
    const ckpt::PeftExportResult r = ckpt::export_peft(a.file, a.output, a.force);
    log::info(
        "wrote LoRA adapters ({}) for PEFT to {}: adapter_config.json and {} tensors in "
        "adapter_model.safetensors; load them with PeftModel.from_pretrained(base, \"{}\") on "
        "the base {}",
        describe_lora(r.model.lora), a.output, r.tensors, a.output, r.base_model);
    return kExitOk;
  }
  if (a.format == "hf") {
    ckpt::HfExportOptions opt;
    opt.max_shard_bytes = parse_bytes(a.max_shard_size, "--max-shard-size");
    if (opt.max_shard_bytes == 0) throw InputError("--max-shard-size must be > 0");
    opt.origin = a.origin;
    opt.force = a.force;
    opt.merge = a.merge;
    opt.base = a.base;
    const ckpt::HfExportResult r = ckpt::export_hf(a.file, a.output, opt);
    log::info(
        "wrote a Hugging Face {} model to {}: config.json, generation_config.json and {} "
        "tensors in {} safetensors file{}",
        r.architecture, a.output, r.tensors, r.shards, r.shards == 1 ? "" : "s");
    if (!r.carried.empty())
      log::info("carried from {}: {} and its special-token ids", a.origin,
                fmt::join(r.carried, ", "));
    return kExitOk;
  }
  const std::size_t n = ckpt::export_safetensors(a.file, a.output);
  log::info("wrote {} tensors to {}", n, a.output);
  return kExitOk;
}

int run_import(const CkptArgs& a) {
  const ckpt::MpiGuard mpi;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ckpt::CheckpointMeta meta;
  try {
    meta = ckpt::import_hf(MPI_COMM_WORLD, a.file, a.output);
  } catch (const comm::AgreedFailure& e) {
    return comm::report_agreed_failure(*comm::MpiCommunicator::borrow(MPI_COMM_WORLD), e);
  }
  if (rank == 0)
    log::info(
        "wrote {} ({} n_layer {} n_head {} n_kv_head {} d_model {} d_ff {} vocab {}, {} "
        "positions{})",
        a.output, arch_name(meta.model.arch), meta.model.n_layer, meta.model.n_head,
        meta.model.kv_heads(), meta.model.d_model, meta.model.ffn_dim(), meta.model.vocab_size,
        meta.model.max_seq_len, meta.model.tied() ? ", tied head" : "");
  return kExitOk;
}

}  // namespace

void add_ckpt_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<CkptArgs>();
  CLI::App* cmd = root.add_subcommand(
      "ckpt",
      "Inspect, export or import a checkpoint file (HDF5; Hugging Face models in and out).");
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
      "export",
      "Write the model weights in another format: safetensors (one file, names as in the "
      "checkpoint), hf (a directory transformers' from_pretrained loads as is; a LoRA "
      "checkpoint with --merge) or peft (a LoRA checkpoint's adapters, a directory peft's "
      "PeftModel.from_pretrained loads onto the base)");
  exp->add_option("file", args->file, "Checkpoint file (.h5)")
      ->required()
      ->check(CLI::ExistingFile);
  exp->add_option("--format", args->format,
                  "Output format (safetensors: a file; hf, peft: a directory)")
      ->check(CLI::IsMember({"safetensors", "hf", "peft"}));
  exp->add_option("-o,--output", args->output,
                  "Output file (safetensors) or directory (hf, peft)")
      ->required();
  exp->add_flag("--merge", args->merge,
                "hf, for a LoRA checkpoint: the base model with the adapters merged in (W + "
                "scale * B A, as PEFT's merge_and_unload), read from the directory the job "
                "started from (its checkpoint records it and its weights' checksum)");
  exp->add_option("--base", args->base,
                  "hf --merge: the base model's Hugging Face directory, when it moved since "
                  "training (its weights must be the ones the adapters were trained on)");
  exp->add_option("--max-shard-size", args->max_shard_size,
                  "hf: largest safetensors shard (e.g. 2GiB); above it the weights are sharded "
                  "with model.safetensors.index.json")
      ->default_val("5GiB");
  exp->add_option("--from", args->origin,
                  "hf: the Hugging Face directory the model was imported from; its special-token "
                  "ids, generation_config.json and tokenizer files are carried into the export "
                  "(`export: hf` in a workload does this for models.NAME.from); it must be that "
                  "model (its config.json is checked against the checkpoint), and the export "
                  "never writes into it");
  exp->add_flag("--force", args->force,
                "hf, peft: replace an output directory that holds something other than an earlier "
                "export of Saturn's (what it holds is deleted); without it such a directory is "
                "refused");
  exp->callback([args, action] { *action = [args] { return run_export(*args); }; });

  CLI::App* imp = cmd->add_subcommand(
      "import",
      "Convert a Hugging Face model directory (config.json + model.safetensors or a sharded "
      "index; GPT2LMHeadModel, LlamaForCausalLM) into a checkpoint file of weights");
  imp->add_option("dir", args->file, "Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  imp->add_option("-o,--output", args->output, "Checkpoint file to write (.h5)")->required();
  imp->callback([args, action] { *action = [args] { return run_import(*args); }; });
}

}  // namespace saturn::cli
