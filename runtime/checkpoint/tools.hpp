// Single-process tools on one checkpoint file: `saturn ckpt inspect` and `saturn ckpt export`.
// They run on MPI_COMM_SELF (MPI must be initialised: see mpi_env.hpp).
#pragma once

#include <filesystem>
#include <string>

#include "runtime/checkpoint/checkpoint.hpp"

namespace saturn::ckpt {

// Metadata and datasets; with `verify`, every checksum recomputed (CheckpointInfo::all_ok).
// Root attributes whose meta_checksum does not match throw CheckpointError.
CheckpointInfo inspect_checkpoint(const std::filesystem::path& file, bool verify = true);

// Human-readable report (what `saturn ckpt inspect` prints).
std::string format_inspection(const std::filesystem::path& file, const CheckpointInfo& info);

// Writes the model weights (not the optimizer state) as a safetensors file: 8-byte little-endian
// header length, a JSON header {"__metadata__": {...}, "<name>": {"dtype": "F32", "shape": [...],
// "data_offsets": [begin, end]}, ...} padded with spaces to a multiple of 8, then the raw
// little-endian float32 data in the header's order. Names are the checkpoint's (Hugging Face).
// Each tensor's checksum is verified as it streams through (one tensor in memory at a time);
// the output is written to OUT.tmp.PID and renamed, so a failed export leaves nothing behind.
// InputError when `out` exists and is not a regular file (check_output_file).
// Returns the number of tensors written.
std::size_t export_safetensors(const std::filesystem::path& file, const std::filesystem::path& out);

// A Hugging Face model directory that `from_pretrained` loads as is (docs/checkpoints.md,
// "Hugging Face models"): config.json (hf::config_json: every field from the checkpoint's
// model), generation_config.json, and the weights as float32 safetensors in the layout's order,
// in model.safetensors, or in model-0000K-of-0000N.safetensors shards of at most
// max_shard_bytes each (a larger tensor gets a shard of its own) with
// model.safetensors.index.json when they do not fit one. Tensors stream through one at a time,
// each verified against its checksum.
//
// The directory is written whole into a staging directory beside `dir` and replaces it only
// when complete (StagedOutputDir), so a failed export leaves `dir` as it was. `dir` must be new,
// empty, or an earlier export of Saturn's (only the files an export writes, its weights marked
// source=saturn-checkpoint); anything else is an InputError unless `force` (which deletes what
// it holds). It may never be, or lie inside, `origin`.
//
// With `origin` (the Hugging Face directory the model was imported from, e.g. the workload's
// models.NAME.from) the export is handed back as it came: the special-token ids of its
// config.json (bos/eos/pad), its generation_config.json, and its tokenizer files
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, vocab.json, merges.txt,
// tokenizer.model, added_tokens.json, those present) are carried over. Its config.json must
// describe the checkpoint's model (InputError naming the field that differs), and is checked
// before anything is written. Without it the special-token ids are null: Saturn does not know
// the tokenizer.
//
// A LoRA job's checkpoint holds adapters, not a model: it exports only with `merge`, as its base
// (from `base`, else the directory its checkpoint records) with the adapters merged in as PEFT's
// merge_and_unload does; the base's weights must be the ones the adapters were trained on
// (CheckpointMeta::base_checksum), else InputError and nothing is written.
struct HfExportOptions {
  std::uint64_t max_shard_bytes = std::uint64_t{5} << 30;
  std::filesystem::path origin;
  bool force = false;
  bool merge = false;
  std::filesystem::path base;
};
struct HfExportResult {
  std::size_t tensors = 0;
  int shards = 0;
  ModelConfig model;
  std::string architecture;          // the class config.json names, e.g. MistralForCausalLM
  std::vector<std::string> carried;  // files copied from options.origin
};
HfExportResult export_hf(const std::filesystem::path& file, const std::filesystem::path& dir,
                         const HfExportOptions& options = {});

// Whether a safetensors file is one of Saturn's exports (metadata source=saturn-checkpoint): an
// export may replace a directory of them without --force.
bool written_by_saturn(const std::filesystem::path& safetensors);

// A LoRA checkpoint's adapters as PEFT saves them, into directory `dir`: adapter_config.json
// (rank, alpha, the target modules, rsLoRA, the base's path) and adapter_model.safetensors
// (base_model.model.<module>.lora_A/B.weight), which peft's PeftModel.from_pretrained(base, dir)
// loads onto the base model as is. InputError for a checkpoint without adapters; the output
// directory's rules are export_hf's.
struct PeftExportResult {
  std::size_t tensors = 0;
  std::string base_model;  // as the checkpoint records it
  ModelConfig model;
};
PeftExportResult export_peft(const std::filesystem::path& file, const std::filesystem::path& dir,
                             bool force = false);

// The base model's tensors in layout order, read from the Hugging Face directory `base`, with
// the adapters of LoRA checkpoint `file` (meta: its metadata) merged in; InputError (after the
// last tensor) when the base is not the one the adapters were trained on.
void visit_merged_tensors(const std::filesystem::path& file, const CheckpointMeta& meta,
                          const std::filesystem::path& base, const TensorVisitor& visit);

// Converts a Hugging Face model directory (hf::read_config, hf::HfWeights) into a checkpoint
// file of weights only (step 0, no optimizer state). Collective over comm: each rank reads and
// writes an equal flat range of the canonical layout, so no rank holds the whole model. The
// ranks agree on every check before writing (comm::AgreedFailure on all of them): `out` not a
// regular file, config.json and the weights' headers, a value that is not finite.
CheckpointMeta import_hf(MPI_Comm comm, const std::filesystem::path& dir,
                         const std::filesystem::path& out);

}  // namespace saturn::ckpt
