// `saturn data prepare`: text files -> llm.c token files with a byte tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace saturn::data {

// Each byte is one token, so the vocabulary is 256 and any file (text or not) tokenizes.
inline constexpr std::uint32_t kByteVocabSize = 256;

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;  // concatenated in this order
  std::filesystem::path output_dir;           // created if missing
  double val_fraction = 0.1;                  // the last fraction of the stream; 0 < f < 1
};

struct PrepareResult {
  std::filesystem::path train_path, val_path;  // output_dir/train.bin, output_dir/val.bin
  std::uint64_t train_tokens = 0, val_tokens = 0;
};

// Tokenizes and concatenates the inputs, then writes the first (1 - val_fraction) of the tokens
// to train.bin and the rest to val.bin (val gets round(n * val_fraction) tokens). Inputs are
// checked before anything is written: a missing input, an empty stream or a fraction that leaves
// either split empty is an InputError and leaves output_dir untouched. Files are written
// atomically (temporary name, then rename).
PrepareResult prepare_byte_dataset(const PrepareOptions& options);

}  // namespace saturn::data
