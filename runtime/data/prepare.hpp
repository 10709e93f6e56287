// `saturn data prepare`: text files -> token files, with the byte tokenizer or a Hugging Face
// tokenizer.json (hf_tokenizer.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
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
  // output_dir/train.bin and val.bin (llm.c, uint16), or train.h5 and val.h5 (HDF5 uint32) for
  // a vocabulary above 65536.
  std::filesystem::path train_path, val_path;
  std::uint64_t train_tokens = 0, val_tokens = 0;
  std::uint64_t vocab_size = 0;
  std::string tokenizer;  // "bytes" or e.g. "tokenizers 0.19.1, BPE, /path/tokenizer.json"
  // Instruction data only: the loss masks and the record starts beside the token files
  // (loss_mask_path, record_starts_path), the records in each split and the tokens trained on
  // (mask 1) in both.
  std::filesystem::path train_mask, val_mask;
  std::filesystem::path train_record_starts, val_record_starts;
  std::uint64_t train_records = 0, val_records = 0, trained_tokens = 0;
};

// Tokenizes and concatenates the inputs, then writes the first (1 - val_fraction) of the tokens
// to train.bin and the rest to val.bin (val gets round(n * val_fraction) tokens). Inputs are
// checked before anything is written: a missing input, an empty stream or a fraction that leaves
// either split empty is an InputError and leaves output_dir untouched. Files are written under
// staging names and renamed into place once all are complete, and a failure removes what this
// call wrote (output_dir too, if it made it), so a failed run leaves no partial or empty output.
PrepareResult prepare_byte_dataset(const PrepareOptions& options);

// The same with a Hugging Face tokenizer: `tokenizer` is a tokenizer.json or a directory
// holding one, `python` the interpreter that runs the `tokenizers` library ("" =
// default_tokenizer_python()). Each input is read as UTF-8 text and encoded as the library's
// encode of the whole text would be, in bounded memory (hf_tokenizer.hpp); the ids are
// concatenated in input order and split as above. The tokenizer and the inputs are checked
// before Python starts; the ids go to a temporary file in output_dir, and a failure leaves
// output_dir as it was (removed, if this call made it). Also writes output_dir/tokenizer.json
// (a copy), so the data names the tokenizer it was made with.
PrepareResult prepare_tokenized_dataset(const PrepareOptions& options,
                                        const std::filesystem::path& tokenizer_path,
                                        const std::string& python);

// Instruction records (JSON Lines: {"prompt", "completion"} or {"messages": [{"role",
// "content"}, ...]}) -> token files, their loss masks (token_file.hpp's loss_mask_path: one
// byte per token, 1 where the token is trained on) and their record starts (record_starts_path:
// the token offset of each record in its split, for packing without cross-attention). Chat records
// are rendered with the chat template of the tokenizer's tokenizer_config.json as transformers
// renders it; the answers (completions, assistant turns with the template's end of turn) and the
// eos after each record are trained, the rest is not (instruct_tokenize.py says exactly). The split
// is by record: val gets the last round(records * val_fraction) records (at least one, and one left
// for train). A malformed record is InputError naming FILE:LINE and nothing is written; otherwise
// as prepare_tokenized_dataset (staging, the tokenizer copied beside the data, with its
// tokenizer_config.json).
PrepareResult prepare_instruction_dataset(const PrepareOptions& options,
                                          const std::filesystem::path& tokenizer_path,
                                          const std::string& python);

}  // namespace saturn::data
