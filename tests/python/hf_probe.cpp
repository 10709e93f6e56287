// Saturn's side of the Hugging Face test (test_hf_models.py): loads a Hugging Face model
// directory the way a job does (hf::read_config, hf::HfWeights, the canonical layout's slices)
// into the CPU model and writes its logits on the given tokens; with targets, also the gradient
// of the mean loss, per tensor.
// Usage: hf_probe HF_DIR TOKENS.json OUT.bin [GRADS.safetensors]
//   TOKENS.json: {"B": b, "T": t, "tokens": [b*t ids], "targets": [b*t ids] (with GRADS)};
//   OUT.bin: [b*t, vocab] float32 logits; GRADS: every parameter's gradient under its
//   Hugging Face name (the engine's layout names), float32.
#include <cstdio>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/checkpoint/slices.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/hf/safetensors.hpp"
#include "runtime/model/cpu_model.hpp"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: hf_probe HF_DIR TOKENS.json OUT.bin [GRADS.safetensors]\n");
    return 2;
  }
  using namespace saturn;
  try {
    const hf::HfModel hm = hf::read_config(argv[1]);
    const hf::HfWeights weights(argv[1], hm.model);
    nlohmann::json in;
    std::ifstream(argv[2]) >> in;
    const int B = in.at("B").get<int>(), T = in.at("T").get<int>();
    const std::vector<std::int32_t> tokens = in.at("tokens").get<std::vector<std::int32_t>>();
    MemoryPool pool("cpu:0");
    CpuModel model(hm.model, pool);
    weights.fill(ckpt::whole_tensor_slices(model.layout(), model.params()));
    std::vector<std::int32_t> targets;
    if (argc == 5) {
      targets = in.at("targets").get<std::vector<std::int32_t>>();
      model.zero_grads();
      model.forward(tokens.data(), targets.data(), B, T);
    } else {
      model.forward_logits(tokens.data(), B, T);
    }
    std::ofstream out(argv[3], std::ios::binary);
    out.write(reinterpret_cast<const char*>(model.logits()),
              static_cast<std::streamsize>(sizeof(float) * static_cast<std::size_t>(B) * T *
                                           static_cast<std::size_t>(hm.model.vocab_size)));
    if (argc == 5) {
      // The backward turns the logits into their gradient in place: written above first.
      // dloss is each token's weight in the objective, so the gradient is the mean loss's.
      model.backward(1.0f / static_cast<float>(B * T));
      hf::SafetensorsWriter::Declared declared;
      for (const auto& t : model.layout().tensors()) declared.emplace_back(t.name, t.shape);
      hf::SafetensorsWriter grads(argv[4], declared, {{"format", "pt"}});
      for (const auto& t : model.layout().tensors())
        grads.write(t.name, model.grads() + t.offset, t.numel);
      grads.finish();
    }
    return out.good() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_probe: %s\n", e.what());
    return 2;
  }
}
