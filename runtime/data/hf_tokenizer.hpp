// `saturn data prepare --tokenizer`: text -> token ids with a Hugging Face tokenizer.json,
// encoded by the `tokenizers` library (a Python wheel, offline data preparation only: training
// never runs Python). The file is checked here first, so that a bad path or file is a clear
// error naming it without starting Python; the encoding itself is the library's.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
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
  std::vector<std::uint64_t> counts;  // ids per input
  std::uint64_t total = 0;            // ids in the ids file: the sum of counts
  std::uint64_t vocab_size = 0;       // the library's (added tokens included) or the file's
  std::string library;                // e.g. "tokenizers 0.19.1"
};

// Encodes each input as the library's Tokenizer.encode of the whole text would (post-processor
// included; truncation and padding off), in windows so that memory stays bounded whatever the
// input (hf_tokenize.py says how the ids stay exact). Writes every input's ids, in input order,
// to `ids_file` as little-endian uint32; the caller removes it, also on failure. Throws
// InputError when the interpreter cannot run or lacks the library, the library rejects the
// tokenizer or cannot encode an input, the tokenizer cannot be used in windows, or an input is
// not UTF-8 (each naming the file); Error when the output is inconsistent.
EncodedText encode_with_hf_tokenizer(const HfTokenizerFile& tokenizer,
                                     const std::vector<std::filesystem::path>& inputs,
                                     const std::string& python,
                                     const std::filesystem::path& ids_file);

// Where encode_instruction_records writes: the ids (little-endian uint32), the loss mask (one
// byte per id, 1 where the token is trained on) and the ids per record (little-endian uint64).
struct RecordFiles {
  std::filesystem::path ids, mask, records;
};

struct EncodedRecords {
  EncodedText text;                       // counts: one entry, the total
  std::vector<std::uint64_t> record_ids;  // ids per record, in input order
  std::uint64_t trained = 0;              // ids whose mask is 1
};

// Instruction records (JSON Lines: {"prompt", "completion"} or {"messages": [...]}) encoded
// with the tokenizer and, for messages, the chat template of its tokenizer_config.json, as
// instruct_tokenize.py says (rendered as transformers renders it; the answers' tokens trained;
// an eos after each record). Every record is checked before anything is written. Throws
// InputError naming FILE:LINE for a malformed record, and as encode_with_hf_tokenizer does
// otherwise; the caller removes the files, also on failure.
EncodedRecords encode_instruction_records(const HfTokenizerFile& tokenizer,
                                          const std::vector<std::filesystem::path>& inputs,
                                          const std::string& python, const RecordFiles& files);

// Reads an ids file that encode_with_hf_tokenizer wrote, front to back, a part at a time, so
// that no more than one split's ids need be in memory.
class IdsReader {
 public:
  // Throws IoError when the file cannot be opened.
  IdsReader(const std::filesystem::path& file, const EncodedText& text,
            const HfTokenizerFile& tokenizer);
  ~IdsReader();
  IdsReader(const IdsReader&) = delete;
  IdsReader& operator=(const IdsReader&) = delete;

  // Fills `out` with the next out.size() ids. Error when one is not below text.vocab_size
  // (naming it and its position), or when it does not fit uint16 (for the first overload);
  // IoError when the file ends early.
  void read(std::span<std::uint16_t> out);
  void read(std::span<std::uint32_t> out);

 private:
  template <class T>
  void read_as(std::span<T> out);

  std::filesystem::path file_;
  std::string tokenizer_;
  std::uint64_t vocab_size_ = 0;
  std::uint64_t position_ = 0;  // ids read so far
  std::FILE* f_ = nullptr;
};

}  // namespace saturn::data
