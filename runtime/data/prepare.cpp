#include "runtime/data/prepare.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <span>
#include <system_error>

#include "runtime/core/error.hpp"
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

}  // namespace

PrepareResult prepare_byte_dataset(const PrepareOptions& options) {
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
  if (n < 2) throw InputError("data prepare: the input files shrank to fewer than 2 bytes");
  const auto n_val = std::min<std::uint64_t>(
      n - 1, std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(
                                            static_cast<double>(n) * options.val_fraction))));

  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec)
    throw IoError(fmt::format("cannot create output directory {}: {}", options.output_dir.string(),
                              ec.message()));
  PrepareResult r;
  r.train_path = options.output_dir / "train.bin";
  r.val_path = options.output_dir / "val.bin";
  r.train_tokens = n - n_val;
  r.val_tokens = n_val;
  const std::span<const std::uint16_t> all(tokens);
  write_llmc_tokens(r.train_path, all.first(r.train_tokens));
  write_llmc_tokens(r.val_path, all.subspan(r.train_tokens));
  return r;
}

}  // namespace saturn::data
