// Token files (DESIGN.md "Token files"): llm.c's format, read and written, and HDF5 files with a
// dataset `/tokens`, read. The format is detected from the file's first bytes, not its name.
//
// llm.c format: a header of 256 little-endian int32 ([0] = 20240520 magic, [1] = 1 version,
// [2] = token count, the rest zero) followed by `count` little-endian uint16 tokens.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace saturn::data {

inline constexpr std::int32_t kLlmcMagic = 20240520;
inline constexpr std::int32_t kLlmcVersion = 1;
inline constexpr std::size_t kLlmcHeaderInts = 256;
inline constexpr std::size_t kLlmcHeaderBytes = kLlmcHeaderInts * sizeof(std::int32_t);

enum class TokenFormat { kLlmc, kHdf5 };
const char* token_format_name(TokenFormat format);  // "llm.c", "hdf5"

// Throws InputError (missing file, directory, neither signature) naming the file.
TokenFormat detect_token_format(const std::filesystem::path& path);

// A read-only sequence of token ids. llm.c files are memory-mapped (uint16 in place, so a file
// costs no memory until touched); HDF5 datasets are read into memory at their stored width.
// Copies share the underlying storage.
class TokenArray {
 public:
  TokenArray() = default;

  // Opens a token file of either format. Every error names the file and is an InputError
  // (missing file, bad magic or version, truncated or oversized file, wrong dataset type, a
  // token >= vocab_size) or an IoError (the system failed to read an existing file).
  // vocab_size 0 skips the vocabulary check.
  static TokenArray open(const std::filesystem::path& path, std::uint32_t vocab_size = 0);
  // In-memory tokens; `name` stands for the file in messages.
  static TokenArray from_tokens(std::vector<std::uint32_t> tokens, std::string name = "<memory>");

  std::uint64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::uint32_t operator[](std::uint64_t i) const { return u16_ ? u16_[i] : u32_[i]; }
  // out[k] = token[begin + k] for k < count; the range must lie inside the array.
  void copy_to(std::uint64_t begin, std::uint64_t count, std::int32_t* out) const;
  // Throws InputError naming the file, the first offending token and its position.
  void validate_vocab(std::uint32_t vocab_size) const;
  // The largest token id (0 when empty): one pass over the tokens.
  std::uint32_t max_token() const;
  // The file path (or the name given to from_tokens), for messages.
  const std::string& name() const { return name_; }

 private:
  struct Storage;
  std::shared_ptr<const Storage> storage_;
  const std::uint16_t* u16_ = nullptr;
  const std::uint32_t* u32_ = nullptr;
  std::uint64_t size_ = 0;
  std::string name_;
};

// All tokens of a file of either format, widened to uint32 (see TokenArray::open for errors).
std::vector<std::uint32_t> read_tokens(const std::filesystem::path& path,
                                       std::uint32_t vocab_size = 0);

// Writes an llm.c token file atomically: a temporary file in the same directory, renamed over
// `path` only once it is complete, so readers never see a partial file. Throws IoError naming
// the file; InputError if there are more tokens than the header's int32 count can hold.
void write_llmc_tokens(const std::filesystem::path& path, std::span<const std::uint16_t> tokens);

// Writes an HDF5 token file (a 1-D uint32 dataset /tokens, chunked and compressed) atomically,
// for vocabularies that do not fit uint16. Throws IoError naming the file.
void write_hdf5_tokens(const std::filesystem::path& path, std::span<const std::uint32_t> tokens);

// The loss mask of instruction data (`data prepare --format jsonl`), beside its token file:
// the same path with the extension ".mask". One byte per token, no header: 1 where the token is
// trained on as a target (an answer's), 0 where it is only context (a prompt's).
std::filesystem::path loss_mask_path(const std::filesystem::path& token_file);
// Writes a loss mask atomically (as write_llmc_tokens). Throws IoError naming the file.
void write_loss_mask(const std::filesystem::path& path, std::span<const std::uint8_t> mask);
// Reads the loss mask of a token file of `tokens` tokens. Throws InputError naming the file when
// its size is not `tokens` bytes or a byte is neither 0 nor 1, IoError when it cannot be read.
std::vector<std::uint8_t> read_loss_mask(const std::filesystem::path& path, std::uint64_t tokens);

// The record boundaries of instruction data (`data prepare --format jsonl`), beside its token
// file: the same path with the extension ".records". The token offset at which each record
// starts, uint64 little-endian, one per record, no header: the first is 0, they strictly
// increase and each is below the token count. Packing without cross-attention (`packing:
// {cross_attention: false}`) needs them to keep each record's attention and positions its own.
std::filesystem::path record_starts_path(const std::filesystem::path& token_file);
// Writes record starts atomically (as write_llmc_tokens). Throws IoError naming the file.
void write_record_starts(const std::filesystem::path& path, std::span<const std::uint64_t> starts);
// Reads the record starts of a token file of `tokens` tokens. Throws InputError naming the file
// and what is wrong (missing, a size that is not a multiple of 8, no start or a first start that
// is not 0, starts that do not strictly increase, a start at or past `tokens`), IoError when it
// cannot be read.
std::vector<std::uint64_t> read_record_starts(const std::filesystem::path& path,
                                              std::uint64_t tokens);

}  // namespace saturn::data
