// `saturn data prepare --tokenizer`: text -> token ids with a Hugging Face tokenizer.json,
// encoded by the `tokenizers` library (a Python wheel, offline data preparation only: training
// never runs Python). The file is checked here first, so that a bad path or file is a clear
// error naming it without starting Python; the encoding itself is the library's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace saturn::data {

struct HfTokenizerFile {
  std::filesystem::path file;    // the tokenizer.json itself
  std::string model_type;        // "BPE", "Unigram", "WordPiece", "WordLevel"
  std::uint64_t vocab_size = 0;  // largest id in the vocabulary or added tokens, plus one
};

// `path` is a tokenizer.json or a directory holding one (a Hugging Face model directory).
// Throws InputError naming the file: missing, not JSON, not a tokenizer (no model with a type
// and a vocabulary), or ids beyond uint32.
HfTokenizerFile inspect_hf_tokenizer(const std::filesystem::path& path);

// The Python that runs the library by default: $SATURN_PYTHON, else the tools venv that
// scripts/install-deps.sh --tests makes ($SATURN_TEST_VENV, default ~/.cache/saturn/test-venv)
// when it exists, else `python3` from PATH.
std::string default_tokenizer_python();

struct EncodedText {
  std::vector<std::uint32_t> ids;     // every input's ids, in input order
  std::vector<std::uint64_t> counts;  // ids per input
  std::uint64_t vocab_size = 0;       // the library's, added tokens included
  std::string library;                // e.g. "tokenizers 0.19.1"
};

// Encodes each input whole with Tokenizer.encode (post-processor included) and concatenates the
// ids. `scratch_dir` holds a temporary ids file, removed on return. Throws InputError when the
// interpreter cannot run or lacks the library, the library rejects the tokenizer, or an input
// is not UTF-8 (each naming the file); Error when the output is inconsistent.
EncodedText encode_with_hf_tokenizer(const HfTokenizerFile& tokenizer,
                                     const std::vector<std::filesystem::path>& inputs,
                                     const std::string& python,
                                     const std::filesystem::path& scratch_dir);

}  // namespace saturn::data
