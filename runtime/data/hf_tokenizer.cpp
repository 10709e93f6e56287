#include "runtime/data/hf_tokenizer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/data/hf_tokenize_script.hpp"
#include "runtime/data/instruct_tokenize_script.hpp"

extern char** environ;

namespace saturn::data {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::uint64_t kMaxUint32Ids = std::uint64_t{1} << 32;
constexpr const char* kProgressPrefix = "saturn-progress ";

// The id of one vocabulary entry; InputError when it is not a non-negative integer.
std::uint64_t entry_id(const json& id, const std::string& file, const std::string& where) {
  if (!id.is_number_unsigned())
    throw InputError(fmt::format("--tokenizer {}: {} has id {} (valid: a non-negative integer)",
                                 file, where, id.dump()));
  return id.get<std::uint64_t>();
}

// Runs argv with stdout and stderr into one pipe; returns (exit status, everything printed).
// The status is -1 when the process could not be started (errno in `spawn_error`).
std::pair<int, std::string> run_capturing(const std::vector<std::string>& argv, int& spawn_error) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw IoError(fmt::format("data prepare: pipe: {}", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  spawn_error = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  if (spawn_error != 0) {
    ::close(fds[0]);
    return {-1, out};
  }
  // Progress lines are shown as they come (encoding a large corpus takes a while), the rest
  // kept for the result and the error messages.
  std::string pending;
  auto take_lines = [&](bool all) {
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos || (all && !pending.empty())) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl == std::string::npos ? pending.size() : nl + 1);
      if (line.rfind(kProgressPrefix, 0) == 0)
        log::info("data prepare: encoded {}", line.substr(std::strlen(kProgressPrefix)));
      else
        out += line + "\n";
    }
  };
  char buf[4096];
  for (;;) {
    const ssize_t got = ::read(fds[0], buf, sizeof buf);
    if (got > 0) {
      pending.append(buf, static_cast<std::size_t>(got));
      take_lines(false);
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  take_lines(true);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return {WEXITSTATUS(status), out};
  return {128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0), out};
}

std::string last_lines(const std::string& text, std::size_t max_chars = 2000) {
  return text.size() <= max_chars ? text : "..." + text.substr(text.size() - max_chars);
}

}  // namespace

HfTokenizerFile inspect_hf_tokenizer(const fs::path& path) {
  std::error_code ec;
  HfTokenizerFile t;
  t.file = fs::is_directory(path, ec) ? path / "tokenizer.json" : path;
  const std::string file = t.file.string();
  if (!fs::exists(t.file, ec))
    throw InputError(fmt::format(
        "--tokenizer: {} does not exist (valid: a Hugging Face tokenizer.json, or a model "
        "directory holding one)",
        file));
  if (!fs::is_regular_file(t.file, ec))
    throw InputError(fmt::format("--tokenizer: {} is not a regular file", file));
  std::ifstream in(t.file, std::ios::binary);
  if (!in)
    throw IoError(fmt::format("--tokenizer: cannot open {}: {}", file, std::strerror(errno)));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(
        fmt::format("--tokenizer {} is not a Hugging Face tokenizer.json: it is not JSON ({})",
                    file, e.what()));
  }
  const auto model = j.is_object() ? j.find("model") : j.end();
  if (!j.is_object() || model == j.end() || !model->is_object() || !model->contains("type") ||
      !model->contains("vocab"))
    throw InputError(fmt::format(
        "--tokenizer {} is not a Hugging Face tokenizer.json: it has no \"model\" object with a "
        "\"type\" and a \"vocab\" (what `tokenizers` saves with Tokenizer.save, and "
        "`save_pretrained` of a fast tokenizer)",
        file));
  t.model_type = (*model)["type"].is_string() ? (*model)["type"].get<std::string>() : "";
  const json& vocab = (*model)["vocab"];
  std::uint64_t ids = 0;
  if (vocab.is_object()) {  // BPE, WordPiece, WordLevel: token -> id
    for (const auto& [token, id] : vocab.items())
      ids = std::max(
          ids, entry_id(id, file, fmt::format("vocabulary token {}", json(token).dump())) + 1);
  } else if (vocab.is_array()) {  // Unigram: [piece, score] in id order
    ids = vocab.size();
  } else {
    throw InputError(
        fmt::format("--tokenizer {}: model.vocab is neither an object nor an array", file));
  }
  if (const auto added = j.find("added_tokens"); added != j.end() && added->is_array())
    for (const auto& a : *added)
      if (a.is_object() && a.contains("id"))
        ids = std::max(ids, entry_id(a["id"], file, "an added token") + 1);
  if (ids > kMaxUint32Ids)
    throw InputError(fmt::format(
        "--tokenizer {}: its vocabulary needs ids up to {}, more than a uint32 token file holds "
        "(valid: ids below {})",
        file, ids - 1, kMaxUint32Ids));
  if (ids == 0) throw InputError(fmt::format("--tokenizer {}: its vocabulary is empty", file));
  t.vocab_size = ids;
  return t;
}

std::string default_tokenizer_python() {
  if (const char* p = std::getenv("SATURN_PYTHON"); p != nullptr && *p != '\0') return p;
  fs::path venv;
  if (const char* v = std::getenv("SATURN_TEST_VENV"); v != nullptr && *v != '\0')
    venv = v;
  else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    venv = fs::path(home) / ".cache/saturn/test-venv";
  std::error_code ec;
  if (!venv.empty() && fs::exists(venv / "bin/python", ec)) return (venv / "bin/python").string();
  return "python3";
}

namespace {

// Runs one of the embedded scripts: `what` names the command for the messages. Returns the JSON
// object the script prints last on success; maps its "saturn-error KIND MESSAGE" line to the
// exception of that kind.
json run_tokenizer_script(const std::string& python, const char* script,
                          const std::vector<std::string>& args, const std::string& what) {
  std::vector<std::string> argv = {python, "-c", script};
  argv.insert(argv.end(), args.begin(), args.end());
  int spawn_error = 0;
  const auto [status, output] = run_capturing(argv, spawn_error);
  if (status < 0)
    throw InputError(
        fmt::format("{}: cannot run the Python interpreter '{}': {} (give one with --python or "
                    "SATURN_PYTHON)",
                    what, python, std::strerror(spawn_error)));
  if (status != 0) {
    const auto at = output.rfind("saturn-error ");
    if (status == 3 && at != std::string::npos) {
      std::string line = output.substr(at + 13);
      if (const auto nl = line.find('\n'); nl != std::string::npos) line.resize(nl);
      const auto sp = line.find(' ');
      const std::string kind = line.substr(0, sp);
      const std::string message = sp == std::string::npos ? "" : line.substr(sp + 1);
      if (kind == "no-library")
        throw InputError(fmt::format(
            "{} needs a Python library that '{}' cannot import ({}). Run "
            "scripts/install-deps.sh --tests (a venv at ~/.cache/saturn/test-venv with "
            "`tokenizers`; jinja2 for chat templates) or give a Python that has it with "
            "--python or SATURN_PYTHON",
            what, python, message));
      if (kind == "not-a-tokenizer")
        throw InputError(fmt::format("{}: not a tokenizer the `tokenizers` library can load: {}",
                                     what, message));
      if (kind == "not-utf8")
        throw InputError(fmt::format("{}: an input is not UTF-8 text: {}", what, message));
      // The library fails on an input, the tokenizer cannot be used in windows, or a record is
      // malformed (each message names the file, and the line for a record).
      if (kind == "encode")
        throw InputError(fmt::format("{}: the library cannot encode {}", what, message));
      if (kind == "unsupported" || kind == "unsplittable" || kind == "bad-record")
        throw InputError(fmt::format("{}: {}", what, message));
      if (kind == "io") throw IoError(fmt::format("{}: {}", what, message));
      throw Error(fmt::format("{}: {}: {}", what, kind, message));
    }
    throw Error(fmt::format("{}: '{}' exited with status {}:\n{}", what, python, status,
                            last_lines(output)));
  }
  const auto brace = output.rfind("\n{");
  const std::string result = output.substr(brace == std::string::npos ? 0 : brace + 1);
  try {
    return json::parse(result);
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: unexpected output from '{}' ({}):\n{}", what, python, e.what(),
                            last_lines(output)));
  }
}

// The size of a file the script wrote, checked against what it reported.
void expect_file_size(const fs::path& file, std::uint64_t bytes, const std::string& what,
                      const std::string& reported) {
  std::error_code ec;
  const auto got = fs::file_size(file, ec);
  if (ec || got != bytes)
    throw Error(fmt::format("{}: {} holds {} bytes, not the {} bytes of {}", what, file.string(),
                            ec ? 0 : got, bytes, reported));
}

}  // namespace

EncodedText encode_with_hf_tokenizer(const HfTokenizerFile& tokenizer,
                                     const std::vector<fs::path>& inputs, const std::string& python,
                                     const fs::path& ids_file) {
  std::vector<std::string> args = {tokenizer.file.string(), ids_file.string()};
  for (const auto& p : inputs) args.push_back(p.string());
  const std::string what = fmt::format("data prepare --tokenizer {}", tokenizer.file.string());
  const json j = run_tokenizer_script(python, kHfTokenizeScript, args, what);
  EncodedText r;
  try {
    r.library = j.at("library").get<std::string>();
    r.vocab_size = j.at("vocab_size").get<std::uint64_t>();
    r.counts = j.at("counts").get<std::vector<std::uint64_t>>();
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: unexpected result from '{}': {}", what, python, e.what()));
  }
  for (auto c : r.counts) r.total += c;
  if (r.counts.size() != inputs.size())
    throw Error(
        fmt::format("{}: counts for {} inputs, not {}", what, r.counts.size(), inputs.size()));
  expect_file_size(ids_file, r.total * sizeof(std::uint32_t), what,
                   fmt::format("the {} ids the tokenizer reported", r.total));
  // Every id must lie below the larger of the library's count and the file's largest id plus
  // one (IdsReader checks each as it reads).
  r.vocab_size = std::max(r.vocab_size, tokenizer.vocab_size);
  return r;
}

EncodedRecords encode_instruction_records(const HfTokenizerFile& tokenizer,
                                          const std::vector<fs::path>& inputs,
                                          const std::string& python, const RecordFiles& files) {
  std::vector<std::string> args = {tokenizer.file.parent_path().string(), files.ids.string(),
                                   files.mask.string(), files.records.string()};
  for (const auto& p : inputs) args.push_back(p.string());
  const std::string what =
      fmt::format("data prepare --format jsonl --tokenizer {}", tokenizer.file.string());
  const json j = run_tokenizer_script(python, kInstructTokenizeScript, args, what);
  EncodedRecords r;
  std::uint64_t records = 0;
  try {
    r.text.library = j.at("library").get<std::string>();
    r.text.vocab_size = std::max(j.at("vocab_size").get<std::uint64_t>(), tokenizer.vocab_size);
    r.text.total = j.at("ids").get<std::uint64_t>();
    r.trained = j.at("trained").get<std::uint64_t>();
    records = j.at("records").get<std::uint64_t>();
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: unexpected result from '{}': {}", what, python, e.what()));
  }
  r.text.counts = {r.text.total};
  const std::string reported = fmt::format("the {} ids of {} records", r.text.total, records);
  expect_file_size(files.ids, r.text.total * sizeof(std::uint32_t), what, reported);
  expect_file_size(files.mask, r.text.total, what, reported);
  expect_file_size(files.records, records * sizeof(std::uint64_t), what, reported);
  r.record_ids.resize(records);
  std::ifstream in(files.records, std::ios::binary);
  in.read(reinterpret_cast<char*>(r.record_ids.data()),
          static_cast<std::streamsize>(records * sizeof(std::uint64_t)));
  if (!in) throw IoError(fmt::format("{}: cannot read {}", what, files.records.string()));
  std::uint64_t sum = 0;
  for (std::uint64_t c : r.record_ids) sum += c;
  if (sum != r.text.total)
    throw Error(fmt::format("{}: the records' ids add up to {}, not {}", what, sum, r.text.total));
  return r;
}

IdsReader::IdsReader(const fs::path& file, const EncodedText& text,
                     const HfTokenizerFile& tokenizer)
    : file_(file), tokenizer_(tokenizer.file.string()), vocab_size_(text.vocab_size) {
  f_ = std::fopen(file.c_str(), "rb");
  if (f_ == nullptr)
    throw IoError(fmt::format("cannot open {}: {}", file.string(), std::strerror(errno)));
}

IdsReader::~IdsReader() {
  if (f_ != nullptr) std::fclose(f_);
}

void IdsReader::read(std::span<std::uint16_t> out) {
  read_as(out);
}
void IdsReader::read(std::span<std::uint32_t> out) {
  read_as(out);
}

template <class T>
void IdsReader::read_as(std::span<T> out) {
  const std::uint64_t limit =
      std::min<std::uint64_t>(vocab_size_, std::uint64_t{std::numeric_limits<T>::max()} + 1);
  std::vector<std::uint32_t> buf(std::min<std::size_t>(out.size(), std::size_t{1} << 20));
  for (std::size_t done = 0; done < out.size();) {
    const std::size_t want = std::min(buf.size(), out.size() - done);
    if (std::fread(buf.data(), sizeof(std::uint32_t), want, f_) != want)
      throw IoError(
          fmt::format("cannot read {}: it ends before id {}", file_.string(), position_ + want));
    for (std::size_t i = 0; i < want; ++i) {
      if (buf[i] >= limit)
        throw Error(fmt::format(
            "data prepare --tokenizer: the library produced id {} at position {}, outside the "
            "vocabulary of {} that {} declares",
            buf[i], position_ + i, vocab_size_, tokenizer_));
      out[done + i] = static_cast<T>(buf[i]);
    }
    done += want;
    position_ += want;
  }
}

}  // namespace saturn::data
