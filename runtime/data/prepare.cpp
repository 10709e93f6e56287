#include "runtime/data/prepare.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <span>
#include <system_error>
#include <utility>

#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
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

// The output directory and the files written into it. Each file is written under a staging name
// and all are renamed into place together by commit(); until then, the destructor removes the
// staged files, and the directory (with any missing parents) if create() made it, so a failed
// run leaves neither a partial nor an empty output directory behind.
class Output {
 public:
  explicit Output(fs::path dir) : dir_(std::move(dir)) {
    // Only a directory known to be missing counts (exists() sets ec when it cannot tell).
    std::error_code ec;
    for (fs::path p = dir_; !p.empty() && !fs::exists(p, ec) && !ec; p = p.parent_path()) {
      made_ = p;
      if (p == p.parent_path()) break;
    }
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  ~Output() {
    if (committed_) return;
    std::error_code ignored;
    for (const auto& [staged, path] : files_) fs::remove(staged, ignored);
    if (created_) fs::remove_all(made_, ignored);
  }

  // Called once there is something to write.
  void create() {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec)
      throw IoError(
          fmt::format("cannot create output directory {}: {}", dir_.string(), ec.message()));
    created_ = !made_.empty();
  }

  // The name to write `name` under until commit().
  fs::path stage(const std::string& name) {
    const fs::path path = dir_ / name;
    check_output_file(path);  // renamed over by commit(): never a FIFO, a device or a link
    files_.emplace_back(fs::path(path.string() + fmt::format(".staged.{}", ::getpid())), path);
    return files_.back().first;
  }

  void commit() {
    for (const auto& [staged, path] : files_) {
      std::error_code ec;
      fs::rename(staged, path, ec);
      if (ec)
        throw IoError(fmt::format("cannot rename {} to {}: {}", staged.string(), path.string(),
                                  ec.message()));
    }
    committed_ = true;
  }

 private:
  fs::path dir_;
  fs::path made_;  // the topmost directory create() makes ("" when dir_ exists)
  bool created_ = false;
  bool committed_ = false;
  std::vector<std::pair<fs::path, fs::path>> files_;  // (staged, final)
};

// A file removed when this goes out of scope.
struct RemoveOnExit {
  fs::path path;
  explicit RemoveOnExit(fs::path p) : path(std::move(p)) {}
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  ~RemoveOnExit() {
    std::error_code ignored;
    fs::remove(path, ignored);
  }
};

// Writes the next `count` ids of the ids file to `path`, so that one split at a time is in
// memory: llm.c uint16 when `narrow`, else HDF5 uint32.
void write_split(IdsReader& ids, std::uint64_t count, bool narrow, const fs::path& path) {
  if (narrow) {
    std::vector<std::uint16_t> tokens(count);
    ids.read(tokens);
    write_llmc_tokens(path, tokens);
  } else {
    std::vector<std::uint32_t> tokens(count);
    ids.read(tokens);
    write_hdf5_tokens(path, tokens);
  }
}

// Stages a copy of `file` into the output directory as `name`, unless it is the file already
// there.
void stage_copy(Output& out, const fs::path& file, const fs::path& output_dir,
                const std::string& name) {
  const fs::path copy = output_dir / name;
  std::error_code ec;
  if (fs::equivalent(file, copy, ec)) return;
  const fs::path staged = out.stage(name);
  fs::copy_file(file, staged, fs::copy_options::overwrite_existing, ec);
  if (ec)
    throw IoError(
        fmt::format("cannot copy {} to {}: {}", file.string(), copy.string(), ec.message()));
}

// The tokenizer beside its data: a later export or inspection needs the same one.
void stage_tokenizer_copy(Output& out, const HfTokenizerFile& tokenizer, const fs::path& dir) {
  stage_copy(out, tokenizer.file, dir, "tokenizer.json");
}

// The encoded ids, r.train_tokens then r.val_tokens of them, as the two token files of
// output_dir: llm.c's uint16 files when every id fits, else HDF5 uint32 (DESIGN.md "Token
// files"). Sets r's paths, vocabulary and tokenizer description.
void write_token_splits(Output& out, const fs::path& output_dir, const fs::path& ids_file,
                        const EncodedText& text, const HfTokenizerFile& tokenizer,
                        PrepareResult& r) {
  r.vocab_size = text.vocab_size;
  r.tokenizer =
      fmt::format("{}, {}, {}", text.library, tokenizer.model_type, tokenizer.file.string());
  const bool narrow = text.vocab_size <= 65536;
  const char* ext = narrow ? ".bin" : ".h5";
  r.train_path = output_dir / fmt::format("train{}", ext);
  r.val_path = output_dir / fmt::format("val{}", ext);
  IdsReader ids(ids_file, text, tokenizer);
  write_split(ids, r.train_tokens, narrow, out.stage(r.train_path.filename().string()));
  write_split(ids, r.val_tokens, narrow, out.stage(r.val_path.filename().string()));
}

// The mask file the instruction encoder wrote, read a split at a time.
class MaskReader {
 public:
  explicit MaskReader(const fs::path& file) : file_(file), in_(file, std::ios::binary) {
    if (!in_) throw IoError(fmt::format("cannot open {}", file.string()));
  }
  std::vector<std::uint8_t> read(std::uint64_t count) {
    std::vector<std::uint8_t> m(count);
    in_.read(reinterpret_cast<char*>(m.data()), static_cast<std::streamsize>(count));
    if (!in_) throw IoError(fmt::format("cannot read {}: it ends early", file_.string()));
    return m;
  }

 private:
  fs::path file_;
  std::ifstream in_;
};

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

  Output out(options.output_dir);
  out.create();
  PrepareResult r;
  r.train_path = options.output_dir / "train.bin";
  r.val_path = options.output_dir / "val.bin";
  r.train_tokens = n - n_val;
  r.val_tokens = n_val;
  r.vocab_size = kByteVocabSize;
  r.tokenizer = "bytes";
  const std::span<const std::uint16_t> all(tokens);
  write_llmc_tokens(out.stage("train.bin"), all.first(r.train_tokens));
  write_llmc_tokens(out.stage("val.bin"), all.subspan(r.train_tokens));
  out.commit();
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
  // The ids file goes in the output directory (it is as large as the data), which is therefore
  // made now; Output removes it again if anything below fails.
  Output out(options.output_dir);
  out.create();
  RemoveOnExit ids_file{options.output_dir / fmt::format(".saturn-ids.tmp.{}", ::getpid())};
  const EncodedText text =
      encode_with_hf_tokenizer(tokenizer, options.inputs, python, ids_file.path);
  const std::uint64_t n = text.total;
  const std::uint64_t n_val = val_count(n, options.val_fraction, "tokens");

  PrepareResult r;
  r.train_tokens = n - n_val;
  r.val_tokens = n_val;
  write_token_splits(out, options.output_dir, ids_file.path, text, tokenizer, r);
  stage_tokenizer_copy(out, tokenizer, options.output_dir);
  out.commit();
  return r;
}

PrepareResult prepare_instruction_dataset(const PrepareOptions& options,
                                          const fs::path& tokenizer_path,
                                          const std::string& python_in) {
  if (tokenizer_path.empty())
    throw InputError(
        "data prepare --format jsonl: no --tokenizer given (the records are encoded with a "
        "Hugging Face tokenizer and its chat template)");
  check_options(options);
  const HfTokenizerFile tokenizer = inspect_hf_tokenizer(tokenizer_path);
  const std::string python = python_in.empty() ? default_tokenizer_python() : python_in;
  Output out(options.output_dir);
  out.create();
  const auto tmp = [&](const char* what) {
    return options.output_dir / fmt::format(".saturn-{}.tmp.{}", what, ::getpid());
  };
  RemoveOnExit ids_file{tmp("ids")}, mask_file{tmp("mask")}, records_file{tmp("records")};
  const EncodedRecords enc = encode_instruction_records(
      tokenizer, options.inputs, python, {ids_file.path, mask_file.path, records_file.path});
  // Split by record, never inside one: val gets the last records.
  const std::uint64_t n = enc.record_ids.size();
  const std::uint64_t n_val = val_count(n, options.val_fraction, "records");
  PrepareResult r;
  r.train_records = n - n_val;
  r.val_records = n_val;
  for (std::uint64_t i = 0; i < n; ++i)
    (i < r.train_records ? r.train_tokens : r.val_tokens) += enc.record_ids[i];
  r.trained_tokens = enc.trained;
  write_token_splits(out, options.output_dir, ids_file.path, enc.text, tokenizer, r);
  r.train_mask = loss_mask_path(r.train_path);
  r.val_mask = loss_mask_path(r.val_path);
  MaskReader mask(mask_file.path);
  write_loss_mask(out.stage(r.train_mask.filename().string()), mask.read(r.train_tokens));
  write_loss_mask(out.stage(r.val_mask.filename().string()), mask.read(r.val_tokens));
  // Where each record starts, per split (val's from 0), for packing without cross-attention.
  std::vector<std::uint64_t> train_starts, val_starts;
  train_starts.reserve(r.train_records);
  val_starts.reserve(r.val_records);
  for (std::uint64_t i = 0, at = 0; i < n; ++i) {
    if (i == r.train_records) at = 0;
    (i < r.train_records ? train_starts : val_starts).push_back(at);
    at += enc.record_ids[i];
  }
  r.train_record_starts = record_starts_path(r.train_path);
  r.val_record_starts = record_starts_path(r.val_path);
  write_record_starts(out.stage(r.train_record_starts.filename().string()), train_starts);
  write_record_starts(out.stage(r.val_record_starts.filename().string()), val_starts);
  stage_tokenizer_copy(out, tokenizer, options.output_dir);
  // The chat template and special tokens, for a later export or inspection.
  const fs::path config = tokenizer.file.parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(config, ec)) stage_copy(out, config, options.output_dir, "tokenizer_config.json");
  out.commit();
  return r;
}

}  // namespace saturn::data
