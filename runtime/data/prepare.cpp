#include "runtime/data/prepare.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <system_error>

#include "runtime/core/error.hpp"
#include "runtime/data/hf_tokenizer.hpp"
#include "runtime/data/token_file.hpp"

namespace saturn::data {

namespace fs = std::filesystem;

namespace {

std::uint64_t input_size(const fs::path& p) {
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (!fs::exists(st)) throw InputError(fmt::format("input file {} does not exist", p.string()));
  if (!fs::is_regular_file(st))
    throw InputError(fmt::format("input {} is not a regular file", p.string()));
  const auto n = fs::file_size(p, ec);
  if (ec) throw IoError(fmt::format("cannot read input file {}: {}", p.string(), ec.message()));
  return n;
}

void append_bytes(const fs::path& p, std::vector<std::uint16_t>& tokens) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  if (!f)
    throw IoError(fmt::format("cannot open input file {}: {}", p.string(), std::strerror(errno)));
  unsigned char buf[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) tokens.insert(tokens.end(), buf, buf + got);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw IoError(fmt::format("cannot read input file {}", p.string()));
}

// The checks every preparation makes before reading anything; returns the inputs' total bytes.
std::uint64_t check_options(const PrepareOptions& options) {
  if (options.inputs.empty()) throw InputError("data prepare: no --input files given");
  if (options.output_dir.empty()) throw InputError("data prepare: no --output directory given");
  if (!(options.val_fraction > 0.0 && options.val_fraction < 1.0))
    throw InputError(
        fmt::format("--val-fraction: {} is out of range (valid: 0 < F < 1)", options.val_fraction));
  {
    std::error_code ec;
    if (fs::exists(options.output_dir, ec) && !fs::is_directory(options.output_dir, ec))
      throw InputError(
          fmt::format("--output: {} exists and is not a directory", options.output_dir.string()));
  }
  std::uint64_t total = 0;
  for (const auto& p : options.inputs) total += input_size(p);
  if (total == 0) throw InputError("data prepare: the input files are empty");
  return total;
}

// Tokens of the val split: round(n * fraction), at least 1, leaving train at least 1.
std::uint64_t val_count(std::uint64_t n, double fraction, const char* unit) {
  if (n < 2)
    throw InputError(fmt::format(
        "data prepare: the inputs make {} {}, too few for a train and a val split", n, unit));
  return std::min<std::uint64_t>(
      n - 1, std::max<std::uint64_t>(
                 1, static_cast<std::uint64_t>(std::llround(static_cast<double>(n) * fraction))));
}

void create_output_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw IoError(fmt::format("cannot create output directory {}: {}", dir.string(), ec.message()));
}

}  // namespace

PrepareResult prepare_byte_dataset(const PrepareOptions& options) {
  const std::uint64_t total = check_options(options);
  const auto val =
      static_cast<std::uint64_t>(std::llround(static_cast<double>(total) * options.val_fraction));
  if (val == 0 || val >= total)
    throw InputError(fmt::format(
        "--val-fraction {}: the inputs hold {} bytes, which leaves the {} split empty (valid: a "
        "fraction that gives both splits at least one token)",
        options.val_fraction, total, val == 0 ? "val" : "train"));

  std::vector<std::uint16_t> tokens;
  tokens.reserve(total);
  for (const auto& p : options.inputs) append_bytes(p, tokens);
  // Re-derive the split from what was read, in case an input changed size meanwhile.
  const std::uint64_t n = tokens.size();
  const std::uint64_t n_val = val_count(n, options.val_fraction, "bytes");

  create_output_dir(options.output_dir);
  PrepareResult r;
  r.train_path = options.output_dir / "train.bin";
  r.val_path = options.output_dir / "val.bin";
  r.train_tokens = n - n_val;
  r.val_tokens = n_val;
  r.vocab_size = kByteVocabSize;
  r.tokenizer = "bytes";
  const std::span<const std::uint16_t> all(tokens);
  write_llmc_tokens(r.train_path, all.first(r.train_tokens));
  write_llmc_tokens(r.val_path, all.subspan(r.train_tokens));
  return r;
}

PrepareResult prepare_tokenized_dataset(const PrepareOptions& options,
                                        const fs::path& tokenizer_path,
                                        const std::string& python_in) {
  if (tokenizer_path.empty())
    throw InputError("data prepare: no --tokenizer given for a tokenized dataset");
  check_options(options);
  const HfTokenizerFile tokenizer = inspect_hf_tokenizer(tokenizer_path);
  const std::string python = python_in.empty() ? default_tokenizer_python() : python_in;
  // The ids file is written beside the output (it is as large as the data); a directory made
  // here is removed again if encoding fails, so a failed run leaves nothing behind.
  std::error_code exists_ec;
  const bool existed = fs::exists(options.output_dir, exists_ec);
  create_output_dir(options.output_dir);
  EncodedText text;
  try {
    text = encode_with_hf_tokenizer(tokenizer, options.inputs, python, options.output_dir);
  } catch (...) {
    std::error_code ignored;
    if (!existed) fs::remove(options.output_dir, ignored);  // only if still empty
    throw;
  }
  const std::uint64_t n = text.ids.size();
  const std::uint64_t n_val = val_count(n, options.val_fraction, "tokens");

  PrepareResult r;
  r.train_tokens = n - n_val;
  r.val_tokens = n_val;
  r.vocab_size = text.vocab_size;
  r.tokenizer =
      fmt::format("{}, {}, {}", text.library, tokenizer.model_type, tokenizer.file.string());
  const std::span<const std::uint32_t> all(text.ids);
  // llm.c's uint16 files when every id fits, else HDF5 uint32 (DESIGN.md "Token files").
  if (text.vocab_size <= 65536) {
    r.train_path = options.output_dir / "train.bin";
    r.val_path = options.output_dir / "val.bin";
    const std::vector<std::uint16_t> narrow(text.ids.begin(), text.ids.end());
    const std::span<const std::uint16_t> n16(narrow);
    write_llmc_tokens(r.train_path, n16.first(r.train_tokens));
    write_llmc_tokens(r.val_path, n16.subspan(r.train_tokens));
  } else {
    r.train_path = options.output_dir / "train.h5";
    r.val_path = options.output_dir / "val.h5";
    write_hdf5_tokens(r.train_path, all.first(r.train_tokens));
    write_hdf5_tokens(r.val_path, all.subspan(r.train_tokens));
  }
  // The tokenizer beside its data: a later export or inspection needs the same one.
  const fs::path copy = options.output_dir / "tokenizer.json";
  std::error_code ec;
  if (!fs::equivalent(tokenizer.file, copy, ec)) {
    const fs::path tmp = fs::path(copy.string() + fmt::format(".tmp.{}", ::getpid()));
    fs::copy_file(tokenizer.file, tmp, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::rename(tmp, copy, ec);
    if (ec) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw IoError(fmt::format("cannot copy {} to {}: {}", tokenizer.file.string(), copy.string(),
                                ec.message()));
    }
  }
  return r;
}

}  // namespace saturn::data
