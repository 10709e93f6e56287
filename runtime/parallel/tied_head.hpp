// GPT-2 (and a LLaMA with tie_embeddings) ties its classifier to the token embedding: the head
// multiplies by the first tensor of the embeddings group (-1, transformer.wte.weight or
// model.embed_tokens.weight), so whatever runs the head reads that tensor and adds the
// classifier's part to its gradient. An untied LLaMA's head is a tensor of its own
// (lm_head.weight, in the final group). Strategies ask here instead of testing the
// architecture: FSDP gathers group -1 for the head too, offload brings the tensor back for the
// head phase, a pipeline's last stage keeps a copy of it, and reproducible mode adds the
// classifier's part as its own term.
#pragma once

#include <cstddef>

#include "runtime/model/config.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::parallel {

struct TiedHead {
  TiedHead(const ModelConfig& config, const ParameterLayout& layout)
      : tied(config.tied()),
        elements(tied && layout.tensors()[0].trainable ? layout.tensors()[0].numel : 0) {}
  bool tied;  // the head reads the first tensor of group -1
  // That tensor's gradient elements, at the start of group -1's gradients (0: not tied, or
  // frozen: a LoRA job's head adds no gradient to the embedding).
  std::size_t elements;
};

}  // namespace saturn::parallel
