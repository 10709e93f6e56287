// Saturn's side of the Hugging Face test (test_hf_models.py): loads a Hugging Face model
// directory the way a job does (hf::read_config, hf::HfWeights, the canonical layout's slices)
// into the CPU model and writes its logits on the given tokens.
// Usage: hf_probe HF_DIR TOKENS.json OUT.bin
//   TOKENS.json: {"B": b, "T": t, "tokens": [b*t ids]}; OUT.bin: [b*t, vocab] float32 logits.
#include <cstdio>
#include <exception>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/checkpoint/slices.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/model/cpu_model.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: hf_probe HF_DIR TOKENS.json OUT.bin\n");
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
    model.forward_logits(tokens.data(), B, T);
    std::ofstream out(argv[3], std::ios::binary);
    out.write(reinterpret_cast<const char*>(model.logits()),
              static_cast<std::streamsize>(sizeof(float) * static_cast<std::size_t>(B) * T *
                                           static_cast<std::size_t>(hm.model.vocab_size)));
    return out.good() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_probe: %s\n", e.what());
    return 2;
  }
}
