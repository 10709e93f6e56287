// The parameter layout of a model: every tensor's Hugging Face name, shape and offset in one
// flat fp32 buffer. Tensors are ordered embeddings, layer 0 … layer L-1, final norm, head, and
// each layer's tensors are contiguous, so a strategy can move or shard a layer as one range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/config.hpp"

namespace saturn {

struct ParamTensor {
  std::string name;                 // e.g. transformer.h.0.attn.c_attn.weight
  std::vector<std::int64_t> shape;  // Hugging Face shape
  std::size_t offset = 0;           // in floats, into the flat buffer
  std::size_t numel = 0;
  bool decay = false;  // AdamW weight decay applies (matrices and embeddings)
  int layer = -1;      // -1: embeddings; 0..L-1: block; L: final norm and head
};

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::size_t total() const { return total_; }
  // [begin, end) in floats of a group: -1 embeddings, 0..L-1 blocks, L final norm + head.
  std::size_t group_begin(int group) const { return group_begin_[group + 1]; }
  std::size_t group_end(int group) const { return group_begin_[group + 2]; }
  const ParamTensor& find(const std::string& name) const;  // throws Error when absent

 private:
  void add(std::string name, std::vector<std::int64_t> shape, bool decay, int layer);
  std::vector<ParamTensor> tensors_;
  std::vector<std::size_t> group_begin_;  // size L+3
  std::size_t total_ = 0;
};

}  // namespace saturn
