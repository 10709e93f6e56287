// HfWeights reads only the boxes asked for: a rank's FSDP shard or tensor-parallel blocks cost
// it its share of the file, not the whole model; the values are the file's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "runtime/checkpoint/slices.hpp"
#include "runtime/core/error.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::hf {
namespace {

namespace fs = std::filesystem;

// Grouped-query attention: 4 query heads share 2 key/value heads (one per tensor-parallel rank
// at degree 2).
ModelConfig tiny_llama() {
  ModelConfig m;
  m.arch = Arch::kLlama;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_model = 32;
  m.d_ff = 48;
  m.vocab_size = 64;
  m.max_seq_len = 16;
  m.rope_theta = 50000.0f;
  return m;
}

// A directory as `saturn ckpt export --format hf` writes it; element i of the flat canonical
// layout holds the value i.
fs::path write_model(const ModelConfig& m, std::vector<float>& flat) {
  const fs::path dir = fs::temp_directory_path() / "saturn-hf-weights-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const ParameterLayout layout(m);
  flat.resize(layout.total());
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i);
  SafetensorsWriter::Declared declared;
  for (const auto& t : layout.tensors()) declared.emplace_back(t.name, t.shape);
  SafetensorsWriter w(dir / "model.safetensors", declared, {{"format", "pt"}});
  for (const auto& t : layout.tensors()) w.write(t.name, flat.data() + t.offset, t.numel);
  w.finish();
  std::ofstream(dir / "config.json") << config_json(m).dump(2);
  return dir;
}

TEST(HfWeights, ConfigRoundTripsAndAnFsdpShardReadsItsHalfOnly) {
  const ModelConfig m = tiny_llama();
  std::vector<float> flat;
  const fs::path dir = write_model(m, flat);
  const HfModel hm = read_config(dir);
  EXPECT_EQ(hm.architecture, "LlamaForCausalLM");
  EXPECT_EQ(hm.model.d_ff, 48);
  EXPECT_EQ(hm.model.rope_theta, 50000.0f);
  EXPECT_EQ(hm.model.norm_eps, m.norm_eps);
  EXPECT_EQ(hm.model.max_seq_len, 16);
  EXPECT_EQ(hm.model.num_parameters(), m.num_parameters());
  EXPECT_EQ(hm.model.kv_heads(), 2);
  EXPECT_FALSE(hm.model.tied());

  const ParameterLayout layout(m);
  const std::size_t half = layout.total() / 2;
  for (int rank = 0; rank < 2; ++rank) {
    const HfWeights w(dir, m);
    const std::size_t begin = rank == 0 ? 0 : half, end = rank == 0 ? half : layout.total();
    std::vector<float> part(end - begin, -1.0f);
    w.fill(ckpt::flat_range_slices(layout, begin, end, part.data()));
    EXPECT_EQ(w.files().bytes_read(), (end - begin) * sizeof(float)) << "rank " << rank;
    for (std::size_t i = 0; i < part.size(); ++i)
      ASSERT_EQ(part[i], flat[begin + i]) << "rank " << rank << " element " << begin + i;
  }
  fs::remove_all(dir);
}

TEST(HfWeights, ATensorParallelRankReadsItsBlocksOnly) {
  const ModelConfig m = tiny_llama();
  std::vector<float> flat;
  const fs::path dir = write_model(m, flat);
  const ParameterLayout canonical(m);
  for (int tp_rank = 0; tp_rank < 2; ++tp_rank) {
    const ParameterLayout local(m, 2);
    std::vector<float> mine(local.total(), -1.0f);
    // The slices a tensor-parallel rank exports: its canonical boxes of every tensor.
    StateSlices slices;
    std::vector<std::vector<float>> boxes;
    for (const auto& t : local.tensors())
      for (const auto& b : canonical_boxes(t, tp_rank)) {
        TensorSlice s;
        s.name = t.name;
        s.shape = t.canonical_shape;
        s.start = b.start;
        s.count = b.count;
        boxes.emplace_back(static_cast<std::size_t>(b.rows * b.cols));
        s.data = boxes.back().data();
        slices.push_back(s);
      }
    const HfWeights w(dir, m);
    w.fill(slices);
    EXPECT_EQ(w.files().bytes_read(), local.total() * sizeof(float)) << "tp rank " << tp_rank;
    // Every value read is the canonical tensor's at the box position.
    for (const auto& s : slices) {
      const ParamTensor& c = canonical.find(s.name);
      const std::int64_t cols = c.canonical_shape.size() == 2 ? c.canonical_shape[1] : 1;
      const std::int64_t rows = s.count[0], ncols = s.count.size() == 2 ? s.count[1] : 1;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < ncols; ++k) {
          const std::int64_t at =
              s.count.size() == 2 ? (s.start[0] + r) * cols + s.start[1] + k : s.start[0] + r;
          ASSERT_EQ(s.data[r * ncols + k], flat[c.offset + static_cast<std::size_t>(at)]) << s.name;
        }
    }
  }
  fs::remove_all(dir);
}

// A tied LLaMA: config.json says so, the files have no lm_head.weight, and one that has it (some
// exporters write the shared tensor twice) is read as transformers does, ignoring it.
TEST(HfWeights, TiedLlamaHasNoHeadTensor) {
  ModelConfig m = tiny_llama();
  m.tie_embeddings = true;
  std::vector<float> flat;
  const fs::path dir = write_model(m, flat);
  const HfModel hm = read_config(dir);
  EXPECT_TRUE(hm.model.tie_embeddings);
  EXPECT_EQ(config_json(hm.model)["tie_word_embeddings"], true);
  EXPECT_EQ(config_json(hm.model)["num_key_value_heads"], 2);
  const HfWeights w(dir, hm.model);
  EXPECT_THROW(w.file_name("lm_head.weight"), Error);
  // The untied model of the same files misses its head.
  ModelConfig untied = m;
  untied.tie_embeddings = false;
  try {
    const HfWeights u(dir, untied);
    ADD_FAILURE() << "an untied LLaMA accepted files without lm_head.weight";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(HfWeights, ShapeMismatchAndUnknownArchitectureAreInputErrors) {
  ModelConfig m = tiny_llama();
  std::vector<float> flat;
  const fs::path dir = write_model(m, flat);
  m.d_ff = 64;  // the file's MLP is 48 wide
  try {
    const HfWeights w(dir, m);
    ADD_FAILURE() << "a 48-wide MLP was accepted for d_ff 64";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp.gate_proj.weight"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "config.json") << R"({"architectures": ["BertModel"]})";
  try {
    read_config(dir);
    ADD_FAILURE() << "BertModel accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("config.json: architectures: BertModel"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// Every way a model shape enters is held to the same limits before anything is sized from it: a
// config.json with 10^9 layers is refused at once (it used to grow memory until killed), and
// 4 * n_embd cannot overflow.
TEST(HfWeights, ShapesBeyondTheLimitsAreRefusedByFieldBeforeAnyAllocation) {
  std::vector<float> flat;
  const fs::path dir = write_model(tiny_llama(), flat);
  auto refusal = [&](const std::string& config) {
    std::ofstream(dir / "config.json") << config;
    try {
      scan_model_dir(dir, read_config(dir).model);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string llama = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64,
      "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
      "num_key_value_heads": 2, "max_position_embeddings": 16, "rope_theta": 50000.0, )";
  EXPECT_EQ(refusal(llama + R"("num_hidden_layers": 2})"), "(no error)");
  EXPECT_NE(refusal(llama + R"("num_hidden_layers": 1000000000})")
                .find("config.json: num_hidden_layers: 1000000000 is out of range (valid: 1..256)"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 64, "n_layer": 1,
      "n_head": 2, "n_positions": 16, "n_embd": 1000000000})")
                .find("config.json: n_embd: 1000000000 is out of range"),
            std::string::npos);
  EXPECT_NE(
      refusal(llama + R"("num_hidden_layers": 2, "vocab_size": 999999999})").find("vocab_size"),
      std::string::npos);
  fs::remove_all(dir);
}

TEST(HfWeights, ANonFiniteWeightIsRefusedNamingItsTensor) {
  std::vector<float> flat;
  const ModelConfig m = tiny_llama();
  const fs::path dir = write_model(m, flat);
  // config.json and the one weight file, each checksummed.
  EXPECT_EQ(scan_model_dir(dir, m).files.size(), 2u);
  // The first value of the embedding becomes NaN, in place in the file.
  const SafetensorsFile f(dir / "model.safetensors");
  const StTensor* t = f.find("model.embed_tokens.weight");
  ASSERT_NE(t, nullptr);
  {
    std::fstream io(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(t->begin));
    const float nan = std::nanf("");
    io.write(reinterpret_cast<const char*>(&nan), 4);
  }
  try {
    scan_model_dir(dir, m);
    ADD_FAILURE() << "a NaN weight passed the scan";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'model.embed_tokens.weight' holds a non-finite"),
              std::string::npos)
        << e.what();
  }
  const HfWeights w(dir, m);  // the headers are fine; reading the value is not
  std::vector<float> row(static_cast<std::size_t>(m.d_model));
  TensorSlice slice;
  slice.name = "model.embed_tokens.weight";
  slice.shape = {m.vocab_size, m.d_model};
  slice.start = {0, 0};
  slice.count = {1, m.d_model};
  slice.data = row.data();
  EXPECT_THROW(w.fill({slice}), InputError);
  slice.start = {1, 0};  // the next row is finite
  EXPECT_NO_THROW(w.fill({slice}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace saturn::hf
