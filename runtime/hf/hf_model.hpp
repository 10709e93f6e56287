// Hugging Face model directories in and out (docs/checkpoints.md, "Hugging Face models"):
// config.json <-> ModelConfig for the families docs/checkpoints.md lists, and the weights of a
// directory checked against the engine's parameter layout and read box by box, so that each
// rank reads only the slices it holds.
//
// The engine implements exactly what it accepts: a config field whose value the engine does
// not compute (rope_scaling, biases in LLaMA, another activation, key/value heads that do not
// divide the query heads, ...) is an InputError naming the file, the field and what is valid; it is
// never ignored.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "runtime/hf/safetensors.hpp"
#include "runtime/model/config.hpp"
#include "runtime/parallel/canonical.hpp"

namespace saturn::hf {

struct HfModel {
  // The engine's model. max_seq_len is the model's position count (GPT-2 n_positions, LLaMA
  // max_position_embeddings): a job trains at most that many tokens per sequence. d_ff is
  // always the real width (never 0).
  ModelConfig model;
  std::filesystem::path config_file;
  std::string architecture;  // GPT2LMHeadModel | LlamaForCausalLM
  // The HF field each ModelConfig field came from, e.g. {"n_head", "num_attention_heads"}, for
  // messages that name both sides.
  std::map<std::string, std::string> field_names;
};

// Reads DIR/config.json (InputError "FILE: FIELD: what is wrong (what is valid)").
HfModel read_config(const std::filesystem::path& dir);

// config.json for `model` with every field the engine's computation depends on set explicitly
// (nothing left to a transformers default that differs), float32 weights.
nlohmann::ordered_json config_json(const ModelConfig& model);
nlohmann::ordered_json generation_config_json(const ModelConfig& model);

// The weights of a model directory for the engine's `model` (layout names, canonical shapes;
// GPT-2's position table may have more rows than model.max_seq_len: the first rows are read).
// Checked on opening, from the headers only: every tensor present with its shape and a float
// dtype (F32, F16, BF16); a tensor the engine has no place for is an InputError too, except
// the buffers transformers itself does not load (attention masks, rotary inv_freq) and a tied
// model's lm_head.weight (GPT-2, LLaMA with tie_word_embeddings), which is its embedding
// (transformers ignores it as well).
// A model directory as a run records it (run_state.json "model_checksums"): the checksum
// (ByteHash) of config.json, of model.safetensors.index.json when sharded, and of every
// safetensors file, by file name.
struct ModelDirChecksums {
  std::map<std::string, std::uint64_t> files;
  std::uint64_t bytes = 0;  // read in all
};

class HfWeights;

// How a family's files store the engine's layout tensors, in layout order: a file tensor is one
// layout tensor of the same name, or (Phi-3's qkv_proj and gate_up_proj) several stacked along
// their first dimension, in the order `parts` lists them.
struct FileTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<std::string> parts;  // layout tensor names
};
std::vector<FileTensor> file_tensors(const ModelConfig& model);

// Reads every file of the model directory once, front to back: checksums each, and checks
// that every value of every weight the engine reads for `model` is finite (InputError naming
// the file and the tensor otherwise), besides HfWeights' checks of the headers. What `saturn
// run` and `saturn train` do for each `from:` before any rank trains.
ModelDirChecksums scan_model_dir(const std::filesystem::path& dir, const ModelConfig& model);

class HfWeights {
 public:
  HfWeights(const std::filesystem::path& dir, const ModelConfig& model);
  const SafetensorsSet& files() const { return set_; }
  // The file's name of a layout tensor (GPT-2 saved from GPT2Model has no "transformer.";
  // Phi-3's q, k, v are rows of qkv_proj).
  const std::string& file_name(const std::string& layout_name) const;
  // The canonical box [start, start + count) of a layout tensor, as float32.
  void read_box(const std::string& layout_name, const std::vector<std::int64_t>& start,
                const std::vector<std::int64_t>& count, float* out) const;
  // Fills every slice (names and boxes of the canonical layout, e.g. a strategy's
  // export_state(kParams)) from the files. InputError naming the file and the tensor when a
  // value read is not finite: no weights Saturn trains or writes ever are.
  void fill(const StateSlices& slices) const;
  // The file tensor names the engine reads (file_name of every layout tensor).
  std::set<std::string> used_names() const;

 private:
  SafetensorsSet set_;
  // Per layout tensor: its file tensor and the first row it occupies there.
  struct Place {
    std::string name;
    std::int64_t row = 0;
  };
  const Place& place(const std::string& layout_name) const;
  std::map<std::string, Place> names_;
};

}  // namespace saturn::hf
