#include "runtime/workload/workload.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "runtime/core/error.hpp"
#include "runtime/data/token_file.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/parallel/strategy.hpp"
#include "solver/problem.hpp"

namespace saturn {

namespace fs = std::filesystem;

namespace {

using Keys = std::vector<std::string>;

// Per-job scalar settings: valid in `defaults:`, in a job and (as lists) in a sweep. `lr`,
// `weight_decay` and `warmup` are shortcuts for optimizer.lr, optimizer.weight_decay and
// schedule.warmup, the values sweeps vary most.
const Keys kScalarTrainKeys = {"lr",           "batch_size",       "seed",
                               "steps",        "seq_len",          "micro_batch_size",
                               "weight_decay", "warmup",           "eval_every",
                               "eval_batches", "checkpoint_every", "reproducible"};
const Keys kTopKeys = {"name",       "data",    "defaults", "models", "jobs",
                       "strategies", "cluster", "solver",   "export", "selection"};
const Keys kDataKeys = {"train", "val"};
const Keys kSubmissionKeys = {"data", "defaults", "models", "jobs"};
const Keys kOptimizerKeys = {"type", "lr", "betas", "eps", "weight_decay", "grad_clip"};
const Keys kScheduleKeys = {"warmup", "decay", "min_lr_ratio"};
const Keys kModelKeys = {"arch",         "n_layer",
                         "n_head",       "n_kv_head",
                         "d_model",      "d_ff",
                         "vocab_size",   "norm_eps",
                         "rope_theta",   "tie_embeddings",
                         "qkv_bias",     "o_bias",
                         "mlp_bias",     "sliding_window",
                         "rope_scaling", "alternate_window",
                         "post_norms",   "query_pre_attn_scalar",
                         "attn_softcap", "final_softcap",
                         "lora",         "from"};
const Keys kRopeScalingKeys = {"type", "factor", "low_freq_factor", "high_freq_factor",
                               "original_max_position_embeddings"};
const Keys kSolverKeys = {"backend", "time_limit", "introspection", "clock", "threads"};
const Keys kIntrospectionKeys = {"interval", "threshold"};
const Keys kDecays = {"cosine", "linear", "constant", "hf_cosine", "hf_linear"};
const Keys kBackends = {"glpk", "cbc"};
const Keys kSolverClocks = {"work", "wall"};
const Keys kExportFormats = {"hf", "peft"};
const Keys kSelectionKeys = {"method", "metric", "min_steps", "reduction_factor", "max_rungs"};
const Keys kSelectionMethods = {"successive-halving", "asha"};
const Keys kSelectionMetrics = {"val_loss"};

Keys concat(std::initializer_list<const Keys*> parts) {
  Keys out;
  for (const Keys* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

const Keys kMapTrainKeys = {"optimizer", "schedule", "early_stop", "lora", "packing"};
const Keys kLoraKeys = {"rank", "alpha", "targets", "use_rslora", "dropout"};
// A sweep varies single adapter settings by their dotted names.
const Keys kLoraSweepKeys = {"lora.rank", "lora.alpha", "lora.targets", "lora.use_rslora"};
const Keys kEarlyStopKeys = {"diverged", "patience"};
const Keys kPackingKeys = {"cross_attention"};
const Keys kPackingSweepKeys = {"packing.cross_attention"};
const Keys kDefaultsKeys = concat({&kScalarTrainKeys, &kMapTrainKeys});
const Keys kNameModel = {"name", "model"};
const Keys kModelKey = {"model"};
const Keys kJobKeys = concat({&kNameModel, &kScalarTrainKeys, &kMapTrainKeys});
const Keys kSweepKeys =
    concat({&kModelKey, &kScalarTrainKeys, &kMapTrainKeys, &kLoraSweepKeys, &kPackingSweepKeys});

// Short forms of swept keys in job ids (lr and batch_size are always in the id).
const std::map<std::string, std::string> kIdAbbrev = {{"seed", "s"},
                                                      {"steps", "steps"},
                                                      {"seq_len", "seq"},
                                                      {"micro_batch_size", "mbs"},
                                                      {"weight_decay", "wd"},
                                                      {"warmup", "wu"},
                                                      {"eval_every", "ee"},
                                                      {"eval_batches", "eb"},
                                                      {"checkpoint_every", "ce"},
                                                      {"reproducible", "repro"},
                                                      {"lora.rank", "r"},
                                                      {"lora.alpha", "a"},
                                                      {"lora.targets", "t"},
                                                      {"lora.use_rslora", "rs"},
                                                      {"packing.cross_attention", "xattn"}};

std::string join(const Keys& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

// Optimal-string-alignment distance: edits plus adjacent transpositions, so that a swapped
// pair of letters (fdsp -> fsdp) counts as one typo.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] != b[j - 1] ? 1 : 0;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// "did you mean 'x'? " when some valid name is close to the given one.
std::string suggestion(const std::string& given, const Keys& valid) {
  if (given.size() > 64) return "";  // no name is that long; spares a large distance table
  const std::string* best = nullptr;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto& v : valid) {
    const std::size_t d = edit_distance(given, v);
    if (d < best_d) {
      best_d = d;
      best = &v;
    }
  }
  if (best && best_d <= std::max<std::size_t>(2, given.size() / 3))
    return fmt::format("did you mean '{}'? ", *best);
  return "";
}

bool contains(const Keys& keys, const std::string& k) {
  return std::find(keys.begin(), keys.end(), k) != keys.end();
}

// Names that become directory names (job ids) must be plain.
bool is_plain_name(const std::string& s) {
  if (s.empty() || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
           c == '+';
  });
}

// Every string holds valid UTF-8 without control characters: names and paths end up in JSON
// (which rejects invalid UTF-8), in file names (where a NUL would cut a path short) and in
// terminal messages.
bool is_clean_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7f) return false;
      ++p;
      continue;
    }
    int more = 0;
    std::uint32_t cp = 0, min = 0;
    if ((c & 0xe0) == 0xc0) {
      more = 1, cp = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      more = 2, cp = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      more = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (end - p <= more) return false;
    for (int i = 1; i <= more; ++i) {
      if ((p[i] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8; C1
    // controls are control characters.
    if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff || (cp >= 0x80 && cp < 0xa0))
      return false;
    p += more + 1;
  }
  return true;
}

// User text quoted in a message: at most 60 bytes, bytes that are not clean UTF-8 as \xNN, so
// that a huge or binary value cannot flood the terminal or break the message's encoding.
std::string quote_text(const std::string& s) {
  constexpr std::size_t kShown = 60;
  std::size_t cut = std::min(s.size(), kShown);
  while (cut < s.size() && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;
  const std::string head = s.substr(0, cut);
  std::string out;
  if (is_clean_utf8(head)) {
    out = head;
  } else {
    for (const char ch : head) {
      const auto c = static_cast<unsigned char>(ch);
      out += c >= 0x20 && c < 0x7f ? std::string(1, ch) : fmt::format("\\x{:02x}", c);
    }
  }
  if (cut < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

bool has_key(const YAML::Node& map, const std::string& key) {
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return true;
  return false;
}

// `lora:` settings of a job as its layers give them (defaults, sweep, job), field by field:
// they override the model's `lora:` (if any) once the job's model, and so its architecture,
// is known (finish_job).
struct LoraSettings {
  std::optional<int> rank;
  std::optional<double> alpha;
  std::optional<std::vector<std::string>> targets;
  std::optional<bool> use_rslora;
  bool any() const { return rank || alpha || targets || use_rslora; }
};

// What a job's layers set: its training configuration and its adapter settings.
struct JobSettings {
  TrainConfig train;
  LoraSettings lora;
};

// The value of a swept key as it appears in a job id (integers exact, decimals compact).
std::string id_value(const std::string& key, const JobSettings& settings) {
  const TrainConfig& t = settings.train;
  const LoraSettings& l = settings.lora;
  if (key == "lora.rank") return std::to_string(l.rank.value_or(0));
  if (key == "lora.alpha") return compact_number(l.alpha.value_or(0));
  if (key == "lora.use_rslora") return l.use_rslora.value_or(false) ? "1" : "0";
  if (key == "lora.targets") {
    std::string out;
    for (const auto& n : l.targets.value_or(std::vector<std::string>{}))
      out += (out.empty() ? "" : "+") + n;
    return out;
  }
  if (key == "seed") return std::to_string(t.seed);
  if (key == "steps") return std::to_string(t.steps);
  if (key == "seq_len") return std::to_string(t.seq_len);
  if (key == "micro_batch_size") return std::to_string(t.micro_batch_size);
  if (key == "warmup") return std::to_string(t.schedule.warmup);
  if (key == "eval_every") return std::to_string(t.eval_every);
  if (key == "eval_batches") return std::to_string(t.eval_batches);
  if (key == "checkpoint_every") return std::to_string(t.checkpoint_every);
  if (key == "reproducible") return t.reproducible ? "1" : "0";
  if (key == "packing.cross_attention") return t.packing.cross_attention ? "1" : "0";
  return compact_number(t.optimizer.weight_decay);
}

std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "nothing";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Scalar:
      break;
  }
  return n.Tag() == "!" ? fmt::format("the quoted string \"{}\"", quote_text(n.Scalar()))
                        : fmt::format("'{}'", quote_text(n.Scalar()));
}

// A map entry with both marks: a null value has no useful mark of its own, so its key's is used.
struct Entry {
  std::string key;
  YAML::Node key_node;
  YAML::Node value;
  std::string path;  // dotted field path, e.g. "models.small.n_head"
  YAML::Mark mark() const { return value.IsNull() ? key_node.Mark() : value.Mark(); }
};

struct MapView {
  YAML::Node node;
  YAML::Mark mark;
  std::string path;
  std::vector<Entry> entries;
  const Entry* find(const std::string& key) const {
    for (const auto& e : entries)
      if (e.key == key) return &e;
    return nullptr;
  }
};

// Where a setting of a job came from, for errors that involve two settings.
struct Where {
  YAML::Mark mark;
  std::string path;
};
using Provenance = std::map<std::string, Where>;         // canonical field -> last place it was set
using LayerFields = std::map<std::string, std::string>;  // canonical field -> path, one entry

std::string child(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}
std::string element(const std::string& path, std::size_t i) {
  return fmt::format("{}[{}]", path, i);
}

class Parser {
 public:
  Parser(std::string file, fs::path base_dir, LoadOptions options)
      : file_(std::move(file)), base_dir_(std::move(base_dir)), options_(options) {}

  Workload parse(const std::string& text);
  // After parse() of the batch's own file: the jobs of one submission (`saturn submit`),
  // appended to `w`, with `options` for its data checks.
  void add_submission(const Submission& sub, const LoadOptions& options, Workload& w);

 private:
  [[noreturn]] void fail(const YAML::Mark& m, const std::string& field,
                         const std::string& what) const {
    throw InputError(fmt::format("{}: {}: {}", loc(m), field, what));
  }
  std::string loc(const YAML::Mark& m) const {
    if (m.line < 0) return file_;
    return fmt::format("{}:{}:{}", file_, m.line + 1, m.column + 1);
  }
  std::string line_col(const YAML::Mark& m) const {
    return fmt::format("{}:{}", m.line + 1, m.column + 1);
  }

  MapView map(const YAML::Node& n, const YAML::Mark& mark, const std::string& path,
              const Keys& valid) const;
  const Entry& require(const MapView& m, const std::string& key, const std::string& what) const;

  double number(const Entry& e) const { return number(e.value, e.mark(), e.path); }
  double number(const YAML::Node& v, const YAML::Mark& mark, const std::string& path) const;
  std::int64_t integer(const YAML::Node& v, const YAML::Mark& mark, const std::string& path) const;
  std::int64_t integer(const Entry& e) const { return integer(e.value, e.mark(), e.path); }
  std::string string(const YAML::Node& v, const YAML::Mark& mark, const std::string& path) const;
  std::string string(const Entry& e) const { return string(e.value, e.mark(), e.path); }
  // A string that names a directory or a job: is_plain_name and at most limits::kNameBytes.
  std::string name(const YAML::Node& v, const YAML::Mark& mark, const std::string& path,
                   const char* what) const;
  std::string choice(const Entry& e, const Keys& valid) const;
  bool boolean(const Entry& e) const;

  void set_field(const std::string& canon, const YAML::Node& v, const YAML::Mark& mark,
                 const std::string& path, JobSettings& settings, Provenance& prov,
                 LayerFields& layer) const;
  void apply_train_entry(const Entry& e, JobSettings& settings, Provenance& prov,
                         LayerFields& layer) const;
  // The adapters `settings` give over `lora` (the model's), for a model of `arch`; errors at
  // the place each field was set.
  void resolve_lora(const LoraSettings& settings, const Provenance& prov, Arch arch,
                    LoraConfig& lora, const YAML::Mark& mark, const std::string& path) const;

  fs::path data_path(const Entry& e) const;
  void check_data(const Entry& e, const fs::path& file, const std::vector<JobSpec>& jobs) const;
  void check_loss_masks(const Entry& train, const Entry& val, const Workload& w) const;
  void check_record_starts(const Entry& e, const fs::path& file, const std::vector<JobSpec>& jobs,
                           std::optional<std::uint64_t> tokens) const;
  void parse_models(const Entry& e);
  // A llama's variant keys (biases, sliding_window, rope_scaling) into `mc`; with `from`, each
  // key given must agree with config.json (`agree(entry, given, theirs)`).
  using Agree = std::function<void(const Entry&, const std::string&, const std::string&)>;
  void parse_llama_variants(const MapView& m, ModelConfig& mc, bool from, const Agree& agree) const;
  void parse_selection(const Entry& e, Workload& w) const;
  // `export: hf`: InputError at the model's line when no Hugging Face class expresses it.
  void check_exportable() const;
  void parse_jobs(const Entry& e, const JobSettings& base, const Provenance& base_prov,
                  Workload& w);
  void finish_job(JobSpec job, const LoraSettings& lora, const Provenance& prov,
                  const YAML::Mark& mark, const std::string& path, Workload& w);
  const ModelConfig& model_named(const YAML::Node& v, const YAML::Mark& mark,
                                 const std::string& path, std::string& name) const;

  std::string file_;
  fs::path base_dir_;
  LoadOptions options_;
  std::map<std::string, std::pair<ModelConfig, YAML::Mark>> models_;
  // Models that start from a Hugging Face directory: the directory and its config.json's
  // position count (a job's seq_len may not exceed it).
  struct Pretrained {
    fs::path dir;
    int positions = 0;
    std::string positions_field;
    std::map<std::string, std::uint64_t> checksums;  // with check_data_contents
  };
  std::map<std::string, Pretrained> pretrained_;
  Keys model_names_;                              // in file order, for messages
  std::map<std::string, std::string> id_origin_;  // job id -> "jobs[i] at L:C"
  // The batch's `defaults:` (a submission's jobs start from them) and the file of each model
  // and of each job id parsed before the current file (submissions).
  JobSettings defaults_;
  Provenance defaults_prov_;
  std::map<std::string, std::string> model_file_;
  std::set<std::string> earlier_ids_;
};

MapView Parser::map(const YAML::Node& n, const YAML::Mark& mark, const std::string& path,
                    const Keys& valid) const {
  MapView m{n, mark, path, {}};
  if (n.IsNull()) return m;  // an empty section, e.g. `defaults:` with nothing under it
  if (!n.IsMap())
    fail(mark, path.empty() ? "workload" : path,
         fmt::format("expected a map, got {} (valid keys: {})", describe(n), join(valid)));
  for (auto it = n.begin(); it != n.end(); ++it) {
    const YAML::Node key = it->first;
    if (!key.IsScalar())
      fail(key.Mark(), path.empty() ? "workload" : path,
           fmt::format("keys must be plain names, got {} (valid keys: {})", describe(key),
                       join(valid)));
    // The path quotes the key as messages do: an unknown key may be long or not UTF-8.
    Entry e{key.Scalar(), key, it->second, child(path, quote_text(key.Scalar()))};
    if (!contains(valid, e.key))
      fail(key.Mark(), e.path,
           fmt::format("unknown key '{}' ({}valid keys here: {})", quote_text(e.key),
                       suggestion(e.key, valid), join(valid)));
    if (const Entry* first = m.find(e.key))
      fail(key.Mark(), e.path,
           fmt::format("key '{}' is given twice (first at {})", e.key,
                       line_col(first->key_node.Mark())));
    m.entries.push_back(std::move(e));
  }
  return m;
}

const Entry& Parser::require(const MapView& m, const std::string& key,
                             const std::string& what) const {
  if (const Entry* e = m.find(key)) return *e;
  fail(m.mark, child(m.path, key), fmt::format("missing (required: {})", what));
}

double Parser::number(const YAML::Node& v, const YAML::Mark& mark, const std::string& path) const {
  if (v.IsScalar() && v.Tag() != "!") {
    std::string s = v.Scalar();
    if (!s.empty() && s[0] == '+') s.erase(0, 1);
    double x = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec == std::errc() && p == s.data() + s.size() && !s.empty()) {
      if (!std::isfinite(x)) fail(mark, path, fmt::format("expected a finite number, got {}", s));
      return x;
    }
  }
  fail(mark, path, fmt::format("expected a number, got {}", describe(v)));
}

std::int64_t Parser::integer(const YAML::Node& v, const YAML::Mark& mark,
                             const std::string& path) const {
  if (v.IsScalar() && v.Tag() != "!") {
    std::string s = v.Scalar();
    if (!s.empty() && s[0] == '+') s.erase(0, 1);
    std::int64_t x = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec == std::errc() && p == s.data() + s.size() && !s.empty()) return x;
    if (ec == std::errc::result_out_of_range)
      fail(mark, path, fmt::format("{} is out of range (valid: a 64-bit integer)", s));
  }
  fail(mark, path, fmt::format("expected an integer, got {}", describe(v)));
}

std::string Parser::string(const YAML::Node& v, const YAML::Mark& mark,
                           const std::string& path) const {
  if (!v.IsScalar()) fail(mark, path, fmt::format("expected a string, got {}", describe(v)));
  const std::string& s = v.Scalar();
  if (s.size() > limits::kStringBytes)
    fail(mark, path,
         fmt::format("the string is {} bytes long (valid: at most {})", s.size(),
                     limits::kStringBytes));
  if (!is_clean_utf8(s))
    fail(mark, path,
         fmt::format("'{}' is not valid UTF-8 text (valid: UTF-8 without control characters)",
                     quote_text(s)));
  return s;
}

std::string Parser::name(const YAML::Node& v, const YAML::Mark& mark, const std::string& path,
                         const char* what) const {
  const std::string s = string(v, mark, path);
  if (!is_plain_name(s) || s.size() > limits::kNameBytes)
    fail(mark, path,
         fmt::format("'{}' is not a plain name (valid: at most {} letters, digits, '-', '_', '.', "
                     "'+', starting with a letter or digit; {})",
                     quote_text(s), limits::kNameBytes, what));
  return s;
}

std::string Parser::choice(const Entry& e, const Keys& valid) const {
  const std::string s = string(e);
  if (!contains(valid, s))
    fail(e.mark(), e.path,
         fmt::format("unknown value '{}' ({}valid: {})", quote_text(s), suggestion(s, valid),
                     join(valid)));
  return s;
}

// Sets one training field from a YAML value, checking its type and range at the value's own
// location. `canon` is the field's canonical name (optimizer.lr, schedule.warmup, steps, ...).
void Parser::set_field(const std::string& canon, const YAML::Node& v, const YAML::Mark& mark,
                       const std::string& path, JobSettings& settings, Provenance& prov,
                       LayerFields& layer) const {
  TrainConfig& tc = settings.train;
  LoraSettings& lora = settings.lora;
  if (auto it = layer.find(canon); it != layer.end())
    fail(mark, path,
         fmt::format("{} is given twice in this entry (also as {})", canon, it->second));
  auto int_field = [&](std::int64_t lo, std::int64_t hi, const std::string& valid) {
    const std::int64_t x = integer(v, mark, path);
    if (x < lo || x > hi) fail(mark, path, fmt::format("{} is out of range (valid: {})", x, valid));
    return x;
  };
  auto num_field = [&](auto ok, const char* valid) {
    const double x = number(v, mark, path);
    if (!ok(x)) fail(mark, path, fmt::format("{} is out of range (valid: {})", x, valid));
    return x;
  };
  auto one_of = [&](const Keys& valid) {
    const std::string s = string(v, mark, path);
    if (!contains(valid, s))
      fail(mark, path,
           fmt::format("unknown value '{}' ({}valid: {})", quote_text(s), suggestion(s, valid),
                       join(valid)));
    return s;
  };
  const std::string steps_range = fmt::format("1..{}", limits::kSteps);
  if (canon == "batch_size") {
    tc.batch_size = int_field(1, limits::kBatchSize, fmt::format("1..{}", limits::kBatchSize));
  } else if (canon == "micro_batch_size") {
    tc.micro_batch_size =
        int_field(0, limits::kBatchSize,
                  fmt::format("1..{}, at most batch_size, or 0 to let the runtime choose",
                              limits::kBatchSize));
  } else if (canon == "seq_len") {
    tc.seq_len =
        static_cast<int>(int_field(1, limits::kSeqLen, fmt::format("1..{}", limits::kSeqLen)));
  } else if (canon == "steps") {
    tc.steps = int_field(1, limits::kSteps, steps_range);
  } else if (canon == "eval_every") {
    tc.eval_every = int_field(0, limits::kSteps, steps_range + ", or 0 for only at the end");
  } else if (canon == "eval_batches") {
    tc.eval_batches =
        int_field(1, limits::kEvalBatches, fmt::format("1..{}", limits::kEvalBatches));
  } else if (canon == "checkpoint_every") {
    tc.checkpoint_every = int_field(0, limits::kSteps, steps_range + ", or 0 for only final.h5");
  } else if (canon == "reproducible" || canon == "early_stop.diverged" ||
             canon == "packing.cross_attention") {
    // YAML 1.2's booleans only: yes/on/1 are not accepted, so a typo cannot pass as true.
    if (!v.IsScalar() || v.Tag() == "!" || (v.Scalar() != "true" && v.Scalar() != "false"))
      fail(mark, path, fmt::format("expected true or false, got {}", describe(v)));
    (canon == "reproducible"          ? tc.reproducible
     : canon == "early_stop.diverged" ? tc.early_stop.diverged
                                      : tc.packing.cross_attention) = v.Scalar() == "true";
  } else if (canon == "early_stop.patience") {
    tc.early_stop.patience =
        int_field(0, limits::kSteps,
                  fmt::format("an integer 1..{} (evaluations without a new best val_loss), or 0 "
                              "for off",
                              limits::kSteps));
  } else if (canon == "seed") {
    tc.seed = static_cast<std::uint64_t>(
        int_field(0, std::numeric_limits<std::int64_t>::max(), "an integer in 0..2^63-1"));
  } else if (canon == "optimizer.type") {
    tc.optimizer.type = one_of({"adamw"});
  } else if (canon == "optimizer.lr") {
    tc.optimizer.lr = num_field([](double x) { return x > 0 && x <= 10; }, "a number in (0, 10]");
  } else if (canon == "optimizer.eps") {
    tc.optimizer.eps = num_field([](double x) { return x > 0 && x <= 1; }, "a number in (0, 1]");
  } else if (canon == "optimizer.weight_decay") {
    tc.optimizer.weight_decay =
        num_field([](double x) { return x >= 0 && x <= 100; }, "a number in [0, 100]");
  } else if (canon == "optimizer.grad_clip") {
    tc.optimizer.grad_clip = num_field([](double x) { return x >= 0 && x <= 1e6; },
                                       "a number in [0, 1e6]; 0 disables clipping");
  } else if (canon == "optimizer.betas") {
    const char* valid = "a list [beta1, beta2] of numbers in [0, 1)";
    if (!v.IsSequence() || v.size() != 2)
      fail(mark, path, fmt::format("expected {}, got {}", valid, describe(v)));
    double b[2];
    for (std::size_t i = 0; i < 2; ++i) {
      const YAML::Node bi = v[i];
      b[i] = number(bi, bi.Mark(), element(path, i));
      if (!(b[i] >= 0 && b[i] < 1))
        fail(bi.Mark(), element(path, i),
             fmt::format("{} is out of range (valid: {})", b[i], valid));
    }
    tc.optimizer.beta1 = b[0];
    tc.optimizer.beta2 = b[1];
  } else if (canon == "schedule.warmup") {
    tc.schedule.warmup = int_field(0, limits::kSteps, "an integer >= 0, at most steps");
  } else if (canon == "schedule.decay") {
    tc.schedule.decay = one_of(kDecays);
  } else if (canon == "lora.rank") {
    lora.rank = static_cast<int>(int_field(0, 4096, "0..4096; 0 for full fine-tuning"));
  } else if (canon == "lora.alpha") {
    lora.alpha = num_field([](double x) { return x > 0 && x <= 1e6; }, "a number in (0, 1e6]");
  } else if (canon == "lora.use_rslora") {
    if (!v.IsScalar() || v.Tag() == "!" || (v.Scalar() != "true" && v.Scalar() != "false"))
      fail(mark, path, fmt::format("expected true or false, got {}", describe(v)));
    lora.use_rslora = v.Scalar() == "true";
  } else if (canon == "lora.dropout") {
    const double x = number(v, mark, path);
    if (x != 0)
      fail(
          mark, path,
          fmt::format("{} is not supported: Saturn trains adapters without dropout (valid: 0)", x));
  } else if (canon == "lora.targets") {
    // A list of names, or one name (a sweep over lora.targets may list single targets).
    std::vector<std::string> names;
    if (v.IsSequence()) {
      if (v.size() == 0)
        fail(mark, path,
             "the list is empty (valid: one or more of q, k, v, qkv, o, gate, up, "
             "down, fc, proj, all-linear)");
      for (std::size_t i = 0; i < v.size(); ++i) {
        const YAML::Node n = v[i];
        names.push_back(string(n, n.Mark(), element(path, i)));
      }
    } else {
      names.push_back(string(v, mark, path));
    }
    lora.targets = names;
  } else if (canon == "schedule.min_lr_ratio") {
    tc.schedule.min_lr_ratio = num_field([](double x) { return x >= 0 && x <= 1; }, "0 to 1");
  } else {
    fail(mark, path, "internal: unhandled setting");
  }
  prov[canon] = Where{mark, path};
  layer[canon] = path;
}

std::string canonical(const std::string& key) {
  if (key == "lr" || key == "weight_decay") return "optimizer." + key;
  if (key == "warmup") return "schedule.warmup";
  return key;
}

// Applies one entry of `defaults:`, a job or a sweep's fixed values to `tc`.
void Parser::apply_train_entry(const Entry& e, JobSettings& settings, Provenance& prov,
                               LayerFields& layer) const {
  if (contains(kMapTrainKeys, e.key)) {
    const MapView m = map(e.value, e.mark(), e.path,
                          e.key == "optimizer"  ? kOptimizerKeys
                          : e.key == "schedule" ? kScheduleKeys
                          : e.key == "lora"     ? kLoraKeys
                          : e.key == "packing"  ? kPackingKeys
                                                : kEarlyStopKeys);
    for (const auto& s : m.entries)
      set_field(e.key + "." + s.key, s.value, s.mark(), s.path, settings, prov, layer);
  } else {
    set_field(canonical(e.key), e.value, e.mark(), e.path, settings, prov, layer);
  }
}

void Parser::resolve_lora(const LoraSettings& settings, const Provenance& prov, Arch arch,
                          LoraConfig& lora, const YAML::Mark& mark, const std::string& path) const {
  const auto at = [&](const char* field) {
    const auto it = prov.find(field);
    return it != prov.end() ? it->second : Where{mark, path};
  };
  if (settings.rank) lora.rank = *settings.rank;
  if (settings.alpha) lora.alpha = *settings.alpha;
  if (settings.use_rslora) lora.use_rslora = *settings.use_rslora;
  if (settings.targets) {
    try {
      lora.targets = parse_lora_targets(*settings.targets, arch);
    } catch (const InputError& err) {
      const Where w = at("lora.targets");
      fail(w.mark, w.path, err.what());
    }
  }
  if (!lora.enabled()) return;
  if (!settings.rank && lora.rank <= 0) {
    const Where w = at("lora.targets");
    fail(w.mark, w.path, "lora needs a rank (valid: lora: {rank: 1..4096, targets: [...]})");
  }
  if (lora.targets == 0) {
    const Where w = at("lora.rank");
    fail(w.mark, fmt::format("{} (lora.targets)", w.path),
         fmt::format("missing: which linears get adapters (valid: {})",
                     arch == Arch::kGpt2 ? "qkv, o, fc, proj, all-linear"
                                         : "q, k, v, qkv, o, gate, up, down, all-linear"));
  }
}

// `selection:` after the jobs: its rungs must lie below every job's steps, on steps where every
// job evaluates (the metric is the validation loss measured at the rung's step).
void Parser::parse_selection(const Entry& e, Workload& w) const {
  const MapView m = map(e.value, e.mark(), e.path, kSelectionKeys);
  SelectionSettings& s = w.selection;
  s.where = loc(e.mark());
  s.method = choice(require(m, "method", "successive-halving or asha"), kSelectionMethods);
  if (const Entry* x = m.find("metric")) s.metric = choice(*x, kSelectionMetrics);
  auto int_in = [&](const Entry& x, std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = integer(x);
    if (v < lo || v > hi)
      fail(x.mark(), x.path, fmt::format("{} is out of range (valid: {}..{})", v, lo, hi));
    return v;
  };
  if (const Entry* x = m.find("reduction_factor")) s.reduction_factor = int_in(*x, 2, 1000);
  if (const Entry* x = m.find("max_rungs")) s.max_rungs = int_in(*x, 1, 60);
  const Entry* min_steps = m.find("min_steps");
  if (min_steps != nullptr) {
    s.min_steps = int_in(*min_steps, 1, limits::kSteps);
  } else {
    // Default: the first evaluation, when every job evaluates at the same interval.
    for (const auto& j : w.jobs) {
      if (j.train.eval_every != w.jobs.front().train.eval_every || j.train.eval_every <= 0)
        fail(e.mark(), child(e.path, "min_steps"),
             fmt::format("missing, and the jobs' eval_every differ or are 0 (job {}: {}, job "
                         "{}: {}) so there is no default (valid: a step count 1..{}, a "
                         "multiple of every job's eval_every)",
                         w.jobs.front().id, w.jobs.front().train.eval_every, j.id,
                         j.train.eval_every, limits::kSteps));
    }
    s.min_steps = w.jobs.front().train.eval_every;
  }
  // The rungs' steps stay within limits::kSteps (no overflow in rung_steps()).
  std::int64_t last = s.min_steps;
  for (std::int64_t k = 1; k < s.max_rungs; ++k) {
    if (last > limits::kSteps / s.reduction_factor)
      fail(e.mark(), e.path,
           fmt::format("rung {} would be past {} steps (min_steps {} x reduction_factor {}^{})", k,
                       limits::kSteps, s.min_steps, s.reduction_factor, k));
    last *= s.reduction_factor;
  }
  const YAML::Mark at = min_steps != nullptr ? min_steps->mark() : e.mark();
  const std::string at_path = child(e.path, "min_steps");
  for (const auto& j : w.jobs) {
    if (j.train.eval_every <= 0)
      fail(at, at_path,
           fmt::format("job {} ({}) evaluates only at its end (eval_every 0): selection needs "
                       "its val_loss at every rung (valid: eval_every dividing every rung step: "
                       "{})",
                       j.id, j.where, fmt::join(s.rung_steps(), ", ")));
    for (const std::int64_t r : s.rung_steps())
      if (r % j.train.eval_every != 0)
        fail(at, at_path,
             fmt::format("rung step {} is not a multiple of job {}'s eval_every {} ({}): its "
                         "val_loss would not be measured there (rungs: {})",
                         r, j.id, j.train.eval_every, j.where, fmt::join(s.rung_steps(), ", ")));
    if (last >= j.train.steps)
      fail(at, at_path,
           fmt::format("the last rung, step {}, is not below job {}'s {} steps ({}) (rungs: "
                       "{}; lower min_steps or max_rungs)",
                       last, j.id, j.train.steps, j.where, fmt::join(s.rung_steps(), ", ")));
  }
}

fs::path Parser::data_path(const Entry& e) const {
  const std::string s = string(e);
  if (s.empty()) fail(e.mark(), e.path, "expected a file path, got an empty string");
  fs::path p(s);
  if (p.is_relative()) p = base_dir_ / p;
  p = fs::absolute(p).lexically_normal();
  if (options_.check_data_files) {
    std::error_code ec;
    if (!fs::exists(p, ec))
      fail(e.mark(), e.path,
           fmt::format("data file {} does not exist (relative paths are resolved against the "
                       "workload file's directory; `saturn data prepare` makes token files)",
                       p.string()));
    if (!fs::is_regular_file(p, ec))
      fail(e.mark(), e.path, fmt::format("{} is not a regular file", p.string()));
  }
  return p;
}

// Instruction data: the train and val files have a loss mask beside them, or neither has.
void Parser::check_loss_masks(const Entry& train, const Entry& val, const Workload& w) const {
  std::error_code ec;
  const bool train_masked = fs::exists(data::loss_mask_path(w.train_data), ec);
  if (train_masked == fs::exists(data::loss_mask_path(w.val_data), ec)) return;
  const Entry& bare = train_masked ? val : train;
  fail(bare.mark(), bare.path,
       fmt::format("{} has a loss mask beside it and {} has none (instruction data needs both: "
                   "`saturn data prepare --format jsonl` writes them together)",
                   (train_masked ? w.train_data : w.val_data).string(),
                   (train_masked ? w.val_data : w.train_data).string()));
}

// Packing without cross-attention: a job with `packing: {cross_attention: false}` needs the
// record starts beside `file` (data::record_starts_path); with `tokens` (the contents are
// checked), valid for that many tokens. Errors point at the `data` entry, name the file and the
// first such job.
void Parser::check_record_starts(const Entry& e, const fs::path& file,
                                 const std::vector<JobSpec>& jobs,
                                 std::optional<std::uint64_t> tokens) const {
  const auto job = std::find_if(jobs.begin(), jobs.end(),
                                [](const JobSpec& j) { return !j.train.packing.cross_attention; });
  if (job == jobs.end()) return;
  const fs::path records = data::record_starts_path(file);
  std::error_code ec;
  if (!fs::exists(records, ec))
    fail(e.mark(), e.path,
         fmt::format("job '{}' has packing: {{cross_attention: false}}, which needs the record "
                     "boundaries {} beside data file {}, and there are none: prepare the data "
                     "with `saturn data prepare --format jsonl` (the job is defined at {})",
                     job->id, records.string(), file.string(), job->where));
  if (!tokens) return;
  try {
    (void)data::read_record_starts(records, *tokens);
  } catch (const Error& err) {  // InputError or IoError: either way unusable
    fail(e.mark(), e.path,
         fmt::format("{} (needed by job '{}', which has packing: {{cross_attention: false}})",
                     err.what(), job->id));
  }
}

// Opens a data file and checks it against every job: a token file, long enough for the job's
// seq_len, no token outside its model's vocabulary. Errors point at the `data` entry, name the
// file and the job.
void Parser::check_data(const Entry& e, const fs::path& file,
                        const std::vector<JobSpec>& jobs) const {
  data::TokenArray tokens;
  try {
    tokens = data::TokenArray::open(file);
  } catch (const Error& err) {  // InputError or IoError: either way unusable as data
    fail(e.mark(), e.path, err.what());
  }
  const std::uint64_t size = tokens.size();
  // Instruction data: a loss mask beside the file must hold one byte per token.
  const fs::path mask = data::loss_mask_path(file);
  std::error_code ec;
  if (fs::exists(mask, ec)) {
    const auto bytes = fs::file_size(mask, ec);
    if (ec || bytes != size)
      fail(e.mark(), e.path,
           fmt::format("the loss mask {} beside data file {} holds {} bytes, not one per token "
                       "({}): prepare the data again with `saturn data prepare --format jsonl`",
                       mask.string(), file.string(), ec ? 0 : bytes, size));
  }
  check_record_starts(e, file, jobs, size);
  const std::uint32_t max_token = tokens.max_token();
  for (const JobSpec& job : jobs) {
    const auto need = static_cast<std::uint64_t>(job.train.seq_len) + 1;
    if (size < need)
      fail(e.mark(), e.path,
           fmt::format("data file {} has {} tokens; job '{}' (seq_len {}) needs at least {} "
                       "(the job is defined at {})",
                       file.string(), size, job.id, job.train.seq_len, need, job.where));
    if (size > 0 && max_token >= static_cast<std::uint32_t>(job.model.vocab_size)) {
      std::uint64_t at = 0;
      while (tokens[at] < static_cast<std::uint32_t>(job.model.vocab_size)) ++at;
      fail(e.mark(), e.path,
           fmt::format("data file {} holds token {} (first at position {}; the largest is {}), "
                       "outside the vocabulary of job '{}', whose model '{}' has vocab_size {} "
                       "(valid: vocab_size > {} in models.{}, or data made for this vocabulary)",
                       file.string(), tokens[at], at, max_token, job.id, job.model_name,
                       job.model.vocab_size, max_token, job.model_name));
    }
  }
}

void Parser::parse_models(const Entry& e) {
  if (!e.value.IsMap() || e.value.size() == 0)
    fail(e.mark(), e.path,
         fmt::format("expected a map of model names to shapes, got {} (e.g. models: {{small: "
                     "{{arch: gpt2, n_layer: 4, n_head: 4, d_model: 256}}}})",
                     e.value.IsMap() ? "an empty map" : describe(e.value)));
  for (auto it = e.value.begin(); it != e.value.end(); ++it) {
    const YAML::Node key = it->first;
    const std::string name = key.IsScalar() ? key.Scalar() : "";
    const std::string path = child(e.path, quote_text(name));
    if (!is_plain_name(name) || name.size() > limits::kNameBytes)
      fail(key.Mark(), e.path,
           fmt::format("model name {} is not a plain name (valid: at most {} letters, digits, "
                       "'-', '_', '.', '+', starting with a letter or digit)",
                       describe(key), limits::kNameBytes));
    if (models_.count(name))
      fail(key.Mark(), path,
           fmt::format("model '{}' is defined twice (first at {})", name,
                       line_col(models_.at(name).second)));
    const YAML::Node v = it->second;
    const YAML::Mark mark = v.IsNull() ? key.Mark() : v.Mark();
    const MapView m = map(v, mark, path, kModelKeys);
    // `from: DIR`: the shape is config.json's; keys also given must agree with it.
    const Entry* from = m.find("from");
    std::optional<hf::HfModel> pre;
    std::map<std::string, std::uint64_t> checksums;
    if (from != nullptr) {
      const std::string s = string(*from);
      if (s.empty()) fail(from->mark(), from->path, "expected a directory, got an empty string");
      fs::path dir(s);
      if (dir.is_relative()) dir = base_dir_ / dir;
      dir = fs::absolute(dir).lexically_normal();
      if (const auto o = options_.model_dirs.find(name); o != options_.model_dirs.end())
        dir = o->second;
      try {
        pre = hf::read_config(dir);
        // The weights' headers: every tensor there, with its shape and a float dtype (not
        // for tools that only plan, which need the shape alone, as they need no data files).
        // With the data's contents, the weights' too: every value finite, and the checksums a
        // run records so that --resume notices a directory changed meanwhile.
        if (options_.check_data_files && options_.check_data_contents) {
          checksums = hf::scan_model_dir(dir, pre->model).files;
        } else if (options_.check_data_files) {
          const hf::HfWeights check(dir, pre->model);
        }
      } catch (const Error& err) {
        fail(from->mark(), from->path, err.what());
      }
      pretrained_[name] = {dir, pre->model.max_seq_len, pre->field_names.at("max_seq_len"),
                           std::move(checksums)};
    }
    const std::string required =
        "arch, n_layer, n_head, d_model, or from: a Hugging Face model directory";
    ModelConfig mc = pre ? pre->model : ModelConfig{};
    // A key given beside `from`: its value must be config.json's.
    auto agree = [&](const Entry& x, const std::string& given, const std::string& theirs) {
      if (given != theirs)
        fail(x.mark(), x.path,
             fmt::format("{} disagrees with {} = {} in {} (valid: {}, or leave it out)", given,
                         pre->field_names.count(x.key) ? pre->field_names.at(x.key)
                                                       : "the model's " + x.key,
                         theirs, pre->config_file.string(), theirs));
    };
    if (const Entry* a = pre ? m.find("arch") : &require(m, "arch", required)) {
      const std::string s = string(*a);
      if (s != "gpt2" && s != "llama")
        fail(a->mark(), a->path,
             fmt::format("unknown arch '{}' ({}valid: gpt2, llama)", quote_text(s),
                         suggestion(s, {"gpt2", "llama"})));
      if (pre)
        agree(*a, s, arch_name(mc.arch));
      else
        mc.arch = parse_arch(s);
    }
    auto int_in = [&](const Entry& x, std::int64_t lo, std::int64_t hi, const char* note) {
      const std::int64_t n = integer(x);
      if (n < lo || n > hi)
        fail(x.mark(), x.path,
             fmt::format("{} is out of range (valid: {}..{}{})", n, lo, hi, note));
      return static_cast<int>(n);
    };
    // Shape keys: required without `from`; with it, optional and checked against config.json.
    auto shape_key = [&](const char* k, int& field, std::int64_t lo, std::int64_t hi,
                         const char* note, bool needed) {
      const Entry* x = pre || !needed ? m.find(k) : &require(m, k, required);
      if (x == nullptr) return;
      const int n = int_in(*x, lo, hi, note);
      if (pre)
        agree(*x, std::to_string(n),
              std::to_string(std::string(k) == "d_ff"        ? mc.ffn_dim()
                             : std::string(k) == "n_kv_head" ? mc.kv_heads()
                                                             : field));
      else
        field = n;
    };
    shape_key("n_layer", mc.n_layer, 1, limits::kLayers, "", true);
    shape_key("n_head", mc.n_head, 1, limits::kDModel, ", dividing d_model", true);
    shape_key("d_model", mc.d_model, 1, limits::kDModel, "", true);
    shape_key("n_kv_head", mc.n_kv_head, 1, limits::kDModel, ", dividing n_head", false);
    shape_key("d_ff", mc.d_ff, 1, limits::kDff, "", false);
    if (const Entry* x = m.find("tie_embeddings")) {
      const bool tie = boolean(*x);
      if (mc.arch == Arch::kGpt2 && !tie)
        fail(x->mark(), x->path,
             "gpt2's head is always its token embedding (valid: true, or leave it out)");
      if (pre)
        agree(*x, tie ? "true" : "false", mc.tied() ? "true" : "false");
      else
        mc.tie_embeddings = tie;
    }
    shape_key("vocab_size", mc.vocab_size, 2, limits::kVocab, "; 256 for byte data", false);
    parse_llama_variants(m, mc, pre.has_value(), agree);
    if (const Entry* x = m.find("lora")) {
      // The model's adapters: its jobs train them (a job's own `lora:` overrides fields).
      JobSettings settings;
      Provenance prov;
      LayerFields layer;
      apply_train_entry(*x, settings, prov, layer);
      resolve_lora(settings.lora, prov, mc.arch, mc.lora, x->mark(), x->path);
    }
    for (const auto& [f, hi] :
         {std::pair<const char*, double>{"norm_eps", 1.0}, {"rope_theta", 1e12}}) {
      if (const Entry* x = m.find(f)) {
        const double d = number(*x);
        if (!(d > 0) || d > hi)
          fail(x->mark(), x->path,
               fmt::format("{} is out of range (valid: a number in (0, {:g}])", d, hi));
        float& field = std::string(f) == "norm_eps" ? mc.norm_eps : mc.rope_theta;
        if (pre) {
          if (mc.arch == Arch::kGpt2 && std::string(f) == "rope_theta")
            fail(x->mark(), x->path, "GPT-2 has no rotary positions (leave rope_theta out)");
          agree(*x, fmt::format("{}", static_cast<float>(d)), fmt::format("{}", field));
        } else {
          field = static_cast<float>(d);
        }
      }
    }
    if (pre) {
      // Limits of the workload format apply to imported shapes too.
      const auto within = [&](const char* k, std::int64_t value, std::int64_t hi) {
        if (value > hi)
          fail(from->mark(), from->path,
               fmt::format("{}: {} = {} exceeds the workload limit {}", pre->config_file.string(),
                           pre->field_names.at(k), value, hi));
      };
      within("n_layer", mc.n_layer, limits::kLayers);
      within("d_model", mc.d_model, limits::kDModel);
      within("d_ff", mc.ffn_dim(), limits::kDff);
      within("vocab_size", mc.vocab_size, limits::kVocab);
    }
    try {
      mc.validate();
    } catch (const InputError& err) {
      fail(mark, path, err.what());
    }
    models_.emplace(name, std::make_pair(mc, key.Mark()));
    model_names_.push_back(name);
  }
}

void Parser::check_exportable() const {
  // Known now, not after a week of training: every model must be one a Hugging Face class
  // expresses (a workload may combine switches none does).
  for (const auto& [name, model] : models_) {
    try {
      (void)hf::config_json(model.first);
    } catch (const InputError& err) {
      fail(model.second, "models." + name,
           fmt::format("`export: hf` cannot write this model: {} (change its keys, or leave "
                       "`export` out and keep the HDF5 checkpoints)",
                       err.what()));
    }
  }
}

bool Parser::boolean(const Entry& x) const {
  // YAML 1.2's booleans only, as for `reproducible`.
  const YAML::Node& b = x.value;
  if (!b.IsScalar() || b.Tag() == "!" || (b.Scalar() != "true" && b.Scalar() != "false"))
    fail(x.mark(), x.path, fmt::format("expected true or false, got {}", describe(b)));
  return b.Scalar() == "true";
}

void Parser::parse_llama_variants(const MapView& m, ModelConfig& mc, bool from,
                                  const Agree& agree) const {
  const auto llama_only = [&](const Entry& x) {
    if (mc.arch != Arch::kLlama)
      fail(x.mark(), x.path,
           fmt::format("{} is a llama key (gpt2 has its own biases, full causal attention, "
                       "learned positions and none of the llama family's switches; leave it out)",
                       x.key));
  };
  for (const auto& [key, member] :
       {std::pair{"qkv_bias", &ModelConfig::qkv_bias}, std::pair{"o_bias", &ModelConfig::o_bias},
        std::pair{"mlp_bias", &ModelConfig::mlp_bias},
        std::pair{"alternate_window", &ModelConfig::alternate_window},
        std::pair{"post_norms", &ModelConfig::post_norms}}) {
    const Entry* x = m.find(key);
    if (x == nullptr) continue;
    llama_only(*x);
    const bool b = boolean(*x);
    if (from)
      agree(*x, b ? "true" : "false", mc.*member ? "true" : "false");
    else
      mc.*member = b;
  }
  if (const Entry* x = m.find("sliding_window")) {
    llama_only(*x);
    const std::int64_t n = integer(*x);
    if (n < 0 || n > limits::kSeqLen)
      fail(x->mark(), x->path,
           fmt::format("{} is out of range (valid: 1..{} keys a query sees, or 0 for full causal "
                       "attention)",
                       n, limits::kSeqLen));
    if (from)
      agree(*x, std::to_string(n), std::to_string(mc.sliding_window));
    else
      mc.sliding_window = static_cast<int>(n);
  }
  // Gemma 2's scale and caps: 0 for none (the scale: 1/sqrt(head_dim)).
  for (const auto& [key, member] :
       {std::pair{"query_pre_attn_scalar", &ModelConfig::query_pre_attn_scalar},
        std::pair{"attn_softcap", &ModelConfig::attn_softcap},
        std::pair{"final_softcap", &ModelConfig::final_softcap}}) {
    const Entry* x = m.find(key);
    if (x == nullptr) continue;
    llama_only(*x);
    const double d = number(*x);
    // As the float the engine computes with: a tiny value would round to 0 (none).
    if (!(d >= 0) || d > 1e6 || (d > 0 && !(static_cast<float>(d) > 0)))
      fail(x->mark(), x->path,
           fmt::format("{} is out of range (valid: 0 for none, or 1e-30 up to 1e6)", d));
    if (from)
      agree(*x, fmt::format("{}", static_cast<float>(d)), fmt::format("{}", mc.*member));
    else
      mc.*member = static_cast<float>(d);
  }
  const Entry* rs = m.find("rope_scaling");
  if (rs == nullptr) return;
  llama_only(*rs);
  if (from)
    fail(rs->mark(), rs->path,
         "the rotary scaling of a `from:` model is its config.json's (leave rope_scaling out)");
  const MapView r = map(rs->value, rs->mark(), rs->path, kRopeScalingKeys);
  const Entry& type = require(r, "type", "type: linear or llama3");
  try {
    mc.rope_scaling = parse_rope_scaling(string(type));
  } catch (const InputError& err) {
    fail(type.mark(), type.path, err.what());
  }
  const auto positive = [&](const char* k, float& field) {
    if (const Entry* x = r.find(k)) {
      const double d = number(*x);
      if (!(d > 0) || d > 1e6)
        fail(x->mark(), x->path, fmt::format("{} is out of range (valid: (0, 1e6])", d));
      field = static_cast<float>(d);
    }
  };
  positive("factor", mc.rope_factor);
  positive("low_freq_factor", mc.rope_low_freq_factor);
  positive("high_freq_factor", mc.rope_high_freq_factor);
  if (const Entry* x = r.find("original_max_position_embeddings")) {
    const std::int64_t n = integer(*x);
    if (n < 1 || n > limits::kSeqLen)
      fail(x->mark(), x->path,
           fmt::format("{} is out of range (valid: 1..{})", n, limits::kSeqLen));
    mc.rope_original_max_positions = static_cast<int>(n);
  }
}

const ModelConfig& Parser::model_named(const YAML::Node& v, const YAML::Mark& mark,
                                       const std::string& path, std::string& name) const {
  name = string(v, mark, path);
  auto it = models_.find(name);
  if (it == models_.end())
    fail(mark, path,
         fmt::format("unknown model '{}' ({}defined in models: {})", quote_text(name),
                     suggestion(name, model_names_), join(model_names_)));
  return it->second.first;
}

// Cross-field checks of a fully resolved job, then registration under its unique id.
void Parser::finish_job(JobSpec job, const LoraSettings& lora, const Provenance& prov,
                        const YAML::Mark& mark, const std::string& path, Workload& w) {
  resolve_lora(lora, prov, job.model.arch, job.model.lora, mark, path);
  const TrainConfig& t = job.train;
  if (!prov.count("batch_size"))
    fail(mark, path + ".batch_size", "missing (give batch_size in the job, its sweep or defaults)");
  if (t.micro_batch_size > t.batch_size) {
    const Where& at = prov.at("micro_batch_size");
    fail(at.mark, at.path,
         fmt::format("micro_batch_size {} exceeds batch_size {} of job '{}' (valid: 1..{}, or 0)",
                     t.micro_batch_size, t.batch_size, job.id, t.batch_size));
  }
  if (t.schedule.warmup > t.steps) {
    const Where& at = prov.at("schedule.warmup");
    fail(at.mark, at.path,
         fmt::format("warmup {} exceeds steps {} of job '{}' (valid: 0..{})", t.schedule.warmup,
                     t.steps, job.id, t.steps));
  }
  // transformers' schedules decay to 0: a min_lr_ratio set beside them would do nothing.
  if ((t.schedule.decay == "hf_cosine" || t.schedule.decay == "hf_linear") &&
      prov.count("schedule.min_lr_ratio")) {
    const Where& at = prov.at("schedule.min_lr_ratio");
    fail(at.mark, at.path,
         fmt::format("min_lr_ratio has no effect with decay {} of job '{}', which decays to 0 as "
                     "transformers does (valid: leave min_lr_ratio out, or decay cosine or linear)",
                     t.schedule.decay, job.id));
  }
  // Where a field was set, or the job itself for a built-in default.
  const auto at = [&](const char* field) {
    const auto it = prov.find(field);
    return it != prov.end() ? it->second : Where{mark, path};
  };
  if (t.early_stop.patience > 0 && t.eval_every <= 0) {
    const Where where = at("early_stop.patience");
    fail(where.mark, where.path,
         fmt::format("patience {} counts evaluations, but job '{}' evaluates only at its end "
                     "(eval_every 0) (valid: give eval_every 1..{}, or patience 0)",
                     t.early_stop.patience, job.id, limits::kSteps));
  }
  // Products of fields, each within its range, checked against limits of their own (doubles:
  // exact here, and no overflow).
  const double T = t.seq_len;
  const double step_tokens = static_cast<double>(t.batch_size) * T;
  if (step_tokens > static_cast<double>(limits::kBatchTokens)) {
    const Where where = at("batch_size");
    fail(where.mark, where.path,
         fmt::format("batch_size {} x seq_len {} is {:.0f} tokens per step for job '{}' (valid: "
                     "at most {})",
                     t.batch_size, t.seq_len, step_tokens, job.id, limits::kBatchTokens));
  }
  const double eval_tokens = static_cast<double>(eval_rows(t)) * T;
  if (eval_tokens > static_cast<double>(limits::kEvalTokens)) {
    const Where where = at("eval_batches");
    fail(where.mark, where.path,
         fmt::format("eval_batches {} of {} rows x seq_len {} is {:.0f} validation tokens per "
                     "evaluation for job '{}' (valid: at most {})",
                     t.eval_batches, eval_rows(t) / t.eval_batches, t.seq_len, eval_tokens, job.id,
                     limits::kEvalTokens));
  }
  if (static_cast<double>(t.steps) * step_tokens > limits::kJobTokens) {
    const Where where = at("steps");
    fail(where.mark, where.path,
         fmt::format("steps {} x batch_size {} x seq_len {} is {:.3g} tokens for job '{}' (valid: "
                     "at most {:g})",
                     t.steps, t.batch_size, t.seq_len, static_cast<double>(t.steps) * step_tokens,
                     job.id, limits::kJobTokens));
  }
  job.model.max_seq_len = t.seq_len;
  if (const auto pre = pretrained_.find(job.model_name); pre != pretrained_.end()) {
    job.init_from = pre->second.dir;
    // The imported model keeps all its positions (GPT-2's whole position table, LLaMA's
    // max_position_embeddings): a job trains the first seq_len, and its export is the whole
    // model again.
    job.model.max_seq_len = pre->second.positions;
    if (t.seq_len > pre->second.positions) {
      const Where where = at("seq_len");
      fail(where.mark, where.path,
           fmt::format("seq_len {} of job '{}' exceeds the {} positions of model '{}' ({} in {}; "
                       "valid: at most {})",
                       t.seq_len, job.id, pre->second.positions, job.model_name,
                       pre->second.positions_field, (pre->second.dir / "config.json").string(),
                       pre->second.positions));
    }
  }
  try {
    job.model.validate();
  } catch (const InputError& err) {
    fail(mark, path, fmt::format("job '{}': {}", job.id, err.what()));
  }
  if (static_cast<double>(job.model.num_parameters()) > limits::kParameters)
    fail(mark, path,
         fmt::format("job '{}': model '{}' has {:.3g} parameters at seq_len {} (valid: at most "
                     "{:g})",
                     job.id, job.model_name, static_cast<double>(job.model.num_parameters()),
                     t.seq_len, limits::kParameters));
  if (!is_plain_name(job.id) || job.id.size() > limits::kJobIdBytes)
    fail(mark, path,
         fmt::format("job id '{}' is not a plain name (valid: at most {} letters, digits, '-', "
                     "'_', '.', '+', starting with a letter or digit; it names the job's "
                     "directory: give the job a shorter `name:` or its model a shorter name)",
                     quote_text(job.id), limits::kJobIdBytes));
  job.where = fmt::format("{}: {}", loc(mark), path);
  const std::string origin = fmt::format("{} at {}", path, line_col(mark));
  if (auto it = id_origin_.find(job.id); it != id_origin_.end() && earlier_ids_.count(job.id))
    fail(mark, path,
         fmt::format("job id '{}' is already in the batch ({}) (valid: an id new to the batch; "
                     "give the job another `name:`)",
                     job.id, it->second));
  if (auto it = id_origin_.find(job.id); it != id_origin_.end())
    fail(mark, path,
         fmt::format("job id '{}' is produced twice, by {} and by {} (valid: unique ids; give "
                     "one of them a `name:`, or remove the repeated sweep value)",
                     job.id, it->second, origin));
  id_origin_.emplace(job.id, origin);
  w.jobs.push_back(std::move(job));
}

void Parser::parse_jobs(const Entry& e, const JobSettings& base, const Provenance& base_prov,
                        Workload& w) {
  if (!e.value.IsSequence())
    fail(e.mark(), e.path,
         fmt::format("expected a list of jobs and sweeps, got {}", describe(e.value)));
  if (e.value.size() == 0)
    fail(e.mark(), e.path, "the list is empty (valid: at least one job or sweep)");
  // The number of jobs, from the list sizes alone, before any sweep is expanded: a sweep of a
  // million jobs is refused in microseconds, not after it exhausted memory.
  std::int64_t total = 0;
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node& item = e.value[i];  // const: operator[] must not add keys
    std::int64_t count = 1;
    std::string factors;
    YAML::Mark mark = item.Mark();
    if (item.IsMap() && has_key(item, "sweep") && item["sweep"].IsMap()) {
      mark = item["sweep"].Mark();
      for (auto it = item["sweep"].begin(); it != item["sweep"].end(); ++it) {
        if (!it->second.IsSequence()) continue;
        const auto n = static_cast<std::int64_t>(it->second.size());
        count = n == 0 ? 0 : std::min(count, limits::kJobs + 1) * std::min(n, limits::kJobs + 1);
        factors += fmt::format("{}{}", factors.empty() ? "" : " x ", n);
      }
    }
    total += std::min(count, limits::kJobs + 1);
    if (total > limits::kJobs)
      fail(mark, element(e.path, i) + (factors.empty() ? "" : ".sweep"),
           fmt::format("the workload has more than {} jobs{} (valid: at most {} jobs in a "
                       "workload, sweeps expanded)",
                       limits::kJobs,
                       factors.empty() ? "" : fmt::format(" (this sweep: {})", factors),
                       limits::kJobs));
  }
  for (std::size_t i = 0; i < e.value.size(); ++i) {
    const YAML::Node item = e.value[i];
    const std::string path = element(e.path, i);
    const YAML::Mark mark = item.IsNull() ? e.mark() : item.Mark();
    if (!item.IsMap())
      fail(mark, path,
           fmt::format("expected a job {{model: ..., batch_size: ...}} or a sweep {{sweep: "
                       "{{model: [...], lr: [...], ...}}}}, got {}",
                       describe(item)));
    if (has_key(item, "sweep")) {
      for (auto it = item.begin(); it != item.end(); ++it)
        if (!it->first.IsScalar() || it->first.Scalar() != "sweep")
          fail(it->first.Mark(), path,
               fmt::format("a sweep entry holds only the key 'sweep', got {} beside it (valid: "
                           "put fixed settings such as steps inside the sweep's map; its jobs "
                           "are named after their swept values)",
                           describe(it->first)));
      const MapView outer = map(item, mark, path, {"sweep"});
      const Entry& s = outer.entries.front();
      const MapView sweep = map(s.value, s.mark(), s.path, kSweepKeys);
      // Swept keys (lists) in id order: model, lr, batch_size, then the rest of kSweepKeys.
      std::vector<const Entry*> fixed, swept;
      for (const auto& x : sweep.entries) (x.value.IsSequence() ? swept : fixed).push_back(&x);
      auto rank = [](const std::string& k) {
        if (k == "model") return std::size_t{0};
        return 1 + static_cast<std::size_t>(
                       std::find(kScalarTrainKeys.begin(), kScalarTrainKeys.end(), k) -
                       kScalarTrainKeys.begin());
      };
      std::stable_sort(swept.begin(), swept.end(),
                       [&](const Entry* a, const Entry* b) { return rank(a->key) < rank(b->key); });
      for (const Entry* x : swept)
        if (x->value.size() == 0)
          fail(x->mark(), x->path, "the list is empty (valid: one or more values to sweep over)");
      if (!sweep.find("model"))
        fail(s.mark(), child(s.path, "model"),
             fmt::format("missing (required: a model name or a list of them; defined: {})",
                         join(model_names_)));
      // Odometer over the swept lists, last key fastest.
      std::vector<std::size_t> idx(swept.size(), 0);
      while (true) {
        JobSpec job;
        JobSettings tc = base;
        Provenance prov = base_prov;
        LayerFields layer;
        std::string model_name;
        for (const Entry* x : fixed) {
          if (x->key == "model")
            job.model = model_named(x->value, x->mark(), x->path, model_name);
          else
            apply_train_entry(*x, tc, prov, layer);
        }
        std::string extra;
        for (std::size_t k = 0; k < swept.size(); ++k) {
          const Entry& x = *swept[k];
          const YAML::Node v = x.value[idx[k]];
          const std::string vpath = element(x.path, idx[k]);
          const YAML::Mark vmark = v.IsNull() ? x.mark() : v.Mark();
          if (x.key == "model") {
            job.model = model_named(v, vmark, vpath, model_name);
          } else if (contains(kMapTrainKeys, x.key)) {
            fail(vmark, x.path,
                 fmt::format("{} cannot be swept as a whole (valid: a map of fixed values; sweep "
                             "{} instead)",
                             x.key,
                             x.key == "lora"      ? "lora.rank, lora.alpha, lora.targets or "
                                                    "lora.use_rslora"
                             : x.key == "packing" ? "packing.cross_attention"
                                                  : "lr, weight_decay or warmup"));
          } else {
            set_field(canonical(x.key), v, vmark, vpath, tc, prov, layer);
            if (x.key != "lr" && x.key != "batch_size")
              extra += "-" + kIdAbbrev.at(x.key) + id_value(x.key, tc);
          }
        }
        job.model_name = model_name;
        job.train = tc.train;
        job.id = default_job_id(model_name, tc.train.optimizer.lr, tc.train.batch_size) + extra;
        finish_job(std::move(job), tc.lora, prov, s.mark(), s.path, w);
        std::size_t k = swept.size();
        while (k > 0 && ++idx[k - 1] == swept[k - 1]->value.size()) idx[--k] = 0;
        if (k == 0) break;
      }
    } else {
      const MapView m = map(item, mark, path, kJobKeys);
      JobSpec job;
      JobSettings tc = base;
      Provenance prov = base_prov;
      LayerFields layer;
      const Entry& model = require(m, "model", "the name of a model defined in models");
      job.model = model_named(model.value, model.mark(), model.path, job.model_name);
      for (const auto& x : m.entries)
        if (x.key != "model" && x.key != "name") apply_train_entry(x, tc, prov, layer);
      job.train = tc.train;
      if (const Entry* n = m.find("name")) {
        job.id = name(n->value, n->mark(), n->path, "it names the job's directory");
      } else {
        job.id = default_job_id(job.model_name, tc.train.optimizer.lr, tc.train.batch_size);
      }
      finish_job(std::move(job), tc.lora, prov, mark, path, w);
    }
  }
}

Workload Parser::parse(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}: malformed YAML: {}", loc(e.mark), e.msg));
  }
  const YAML::Mark top_mark = root.Mark().line < 0 ? YAML::Mark() : root.Mark();
  if (root.IsNull())
    fail(top_mark, "workload", "the file is empty (required keys: data, models, jobs)");
  const MapView top = map(root, top_mark, "", kTopKeys);

  Workload w;
  // The name is the run directory's (runs/NAME): a path there would escape runs/.
  if (const Entry* e = top.find("name")) {
    w.name = name(e->value, e->mark(), e->path, "it names the run directory, runs/NAME");
  } else {
    w.name = fs::path(file_).stem().string();
    if (!is_plain_name(w.name) || w.name.size() > limits::kNameBytes)
      fail(top_mark, "name",
           fmt::format("missing, and the file name '{}' is not a plain name to use instead "
                       "(valid: `name:` with at most {} letters, digits, '-', '_', '.', '+', "
                       "starting with a letter or digit)",
                       quote_text(w.name), limits::kNameBytes));
  }

  const std::string data_required = "data: {train: FILE, val: FILE}";
  const Entry& data = require(top, "data", data_required);
  const MapView dm = map(data.value, data.mark(), data.path, kDataKeys);
  const Entry& train = require(dm, "train", "train and val token files");
  const Entry& val = require(dm, "val", "train and val token files");
  w.train_data = data_path(train);
  w.val_data = data_path(val);

  JobSettings base;
  Provenance base_prov;
  if (const Entry* e = top.find("defaults")) {
    const MapView m = map(e->value, e->mark(), e->path, kDefaultsKeys);
    LayerFields layer;
    for (const auto& x : m.entries) apply_train_entry(x, base, base_prov, layer);
  }
  defaults_ = base;
  defaults_prov_ = base_prov;

  parse_models(
      require(top, "models", "models: {NAME: {arch: gpt2|llama, n_layer, n_head, d_model}}"));
  parse_jobs(require(top, "jobs", "a list of jobs and sweeps"), base, base_prov, w);
  for (const auto& [name, pre] : pretrained_) {
    w.pretrained_dirs[name] = pre.dir;
    if (!pre.checksums.empty()) w.pretrained_checksums[name] = pre.checksums;
  }
  if (options_.check_data_files && options_.check_data_contents) {
    check_data(train, w.train_data, w.jobs);
    check_data(val, w.val_data, w.jobs);
    check_loss_masks(train, val, w);
  } else if (options_.check_data_files) {
    check_record_starts(train, w.train_data, w.jobs, std::nullopt);
    check_record_starts(val, w.val_data, w.jobs, std::nullopt);
  }

  w.strategies = known_strategies();
  if (const Entry* e = top.find("strategies")) {
    if (!e->value.IsSequence() || e->value.size() == 0)
      fail(e->mark(), e->path,
           fmt::format("expected a non-empty list of strategies, got {} (valid: {})",
                       e->value.IsSequence() ? "an empty list" : describe(e->value),
                       join(known_strategies())));
    w.strategies.clear();
    for (std::size_t i = 0; i < e->value.size(); ++i) {
      const YAML::Node v = e->value[i];
      const std::string path = element(e->path, i);
      const YAML::Mark mark = v.IsNull() ? e->mark() : v.Mark();
      const std::string s = string(v, mark, path);
      if (!contains(known_strategies(), s))
        fail(mark, path,
             fmt::format("unknown strategy '{}' ({}valid: {})", quote_text(s),
                         suggestion(s, known_strategies()), join(known_strategies())));
      if (contains(w.strategies, s)) fail(mark, path, fmt::format("'{}' is listed twice", s));
      w.strategies.push_back(s);
    }
  }

  if (const Entry* e = top.find("export")) {
    w.export_format = choice(*e, kExportFormats);
    check_exportable();
    // A LoRA job's export merges its adapters into its base (hf), or hands them back for a
    // base PEFT can load (peft): both need the base to come from a directory.
    for (const auto& j : w.jobs)
      if (j.model.lora.enabled() && j.init_from.empty())
        fail(e->mark(), e->path,
             fmt::format("`export: {}` hands LoRA job '{}' back on its base, but its model '{}' "
                         "starts from random weights, which no directory holds (valid: give "
                         "the model a `from:` directory, or leave `export` out and keep the "
                         "HDF5 checkpoints)",
                         w.export_format, j.id, j.model_name));
  }
  if (const Entry* e = top.find("selection")) parse_selection(*e, w);

  if (const Entry* e = top.find("cluster")) {
    w.cluster = string(*e);
    if (w.cluster.empty())
      fail(e->mark(), e->path, "expected auto or a cluster spec such as 2x8:80GiB or 8+4");
    if (w.cluster != "auto") {
      try {
        solver::parse_cluster_spec(w.cluster);
      } catch (const solver::SolverError& err) {
        fail(e->mark(), e->path, err.what());
      }
    }
    w.cluster_where = loc(e->mark());
  }

  if (const Entry* e = top.find("solver")) {
    const MapView m = map(e->value, e->mark(), e->path, kSolverKeys);
    if (const Entry* x = m.find("backend")) w.solver.backend = choice(*x, kBackends);
    if (const Entry* x = m.find("clock")) w.solver.clock = choice(*x, kSolverClocks);
    if (const Entry* x = m.find("threads")) {
      const double t = number(*x);
      if (!(t >= 1 && t <= 256 && t == std::floor(t)))
        fail(x->mark(), x->path, fmt::format("{} is not a thread count (valid: 1 to 256)", t));
      if (t > 1 && w.solver.backend == "cbc")
        fail(x->mark(), x->path, "several solver threads need backend glpk (CBC runs in one)");
      w.solver.threads = static_cast<int>(t);
    }
    if (const Entry* x = m.find("time_limit")) {
      w.solver.time_limit_s = number(*x);
      if (!(w.solver.time_limit_s > 0 && w.solver.time_limit_s <= 1e7))
        fail(x->mark(), x->path,
             fmt::format("{} is out of range (valid: seconds in (0, 1e7])", w.solver.time_limit_s));
    }
    if (const Entry* x = m.find("introspection")) {
      const MapView im = map(x->value, x->mark(), x->path, kIntrospectionKeys);
      if (const Entry* y = im.find("interval")) {
        w.solver.introspection.interval_s = number(*y);
        if (!(w.solver.introspection.interval_s > 0 && w.solver.introspection.interval_s <= 1e9))
          fail(y->mark(), y->path,
               fmt::format("{} is out of range (valid: seconds in (0, 1e9])",
                           w.solver.introspection.interval_s));
      }
      if (const Entry* y = im.find("threshold")) {
        w.solver.introspection.threshold = number(*y);
        if (!(w.solver.introspection.threshold >= 0 && w.solver.introspection.threshold < 1))
          fail(y->mark(), y->path,
               fmt::format("{} is out of range (valid: a fraction in [0, 1), e.g. 0.05)",
                           w.solver.introspection.threshold));
      }
    }
  }
  return w;
}

void Parser::add_submission(const Submission& sub, const LoadOptions& options, Workload& w) {
  // What was parsed so far belongs to earlier files: their errors name them.
  for (const auto& name : model_names_) model_file_.try_emplace(name, file_);
  for (auto& [id, origin] : id_origin_)
    if (earlier_ids_.insert(id).second) origin += " of " + file_;
  for (auto& [field, where] : defaults_prov_) {
    if (where.mark.line >= 0)
      where.path = fmt::format("{} (the batch's, {})", where.path, loc(where.mark));
    where.mark = YAML::Mark::null_mark();
  }
  file_ = sub.source.string();
  base_dir_ = sub.source.parent_path().empty() ? fs::path(".") : sub.source.parent_path();
  options_ = options;
  if (sub.yaml.size() > limits::kFileBytes)
    throw InputError(fmt::format("{}: the file is {} bytes (valid: at most {})", file_,
                                 sub.yaml.size(), limits::kFileBytes));
  YAML::Node root;
  try {
    root = YAML::Load(sub.yaml);
  } catch (const YAML::ParserException& e) {
    throw InputError(fmt::format("{}: malformed YAML: {}", loc(e.mark), e.msg));
  }
  const YAML::Mark top_mark = root.Mark().line < 0 ? YAML::Mark() : root.Mark();
  if (root.IsNull())
    fail(top_mark, "submission",
         "the file is empty (required: jobs; optional: models, defaults, data)");
  const MapView top = map(root, top_mark, "", kSubmissionKeys);
  const Entry& jobs = require(top, "jobs", "a list of jobs and sweeps to add to the batch");
  if (w.selection.enabled())
    fail(jobs.mark(), jobs.path,
         fmt::format("the batch selects its jobs (selection: {} at {}), and a job added while "
                     "rungs are being decided has no place in them: adding jobs to a selecting "
                     "batch is not supported",
                     w.selection.method, w.selection.where));
  const Entry* data = top.find("data");
  fs::path train, val;  // the submission's own data (empty: the batch's)
  const Entry* train_entry = nullptr;
  const Entry* val_entry = nullptr;
  std::optional<MapView> dm;
  if (data != nullptr) {
    dm = map(data->value, data->mark(), data->path, kDataKeys);
    train_entry = &require(*dm, "train", "train and val token files");
    val_entry = &require(*dm, "val", "train and val token files");
    train = data_path(*train_entry);
    val = data_path(*val_entry);
  }
  JobSettings base = defaults_;
  Provenance base_prov = defaults_prov_;
  if (const Entry* e = top.find("defaults")) {
    const MapView m = map(e->value, e->mark(), e->path, kDefaultsKeys);
    LayerFields layer;
    for (const auto& x : m.entries) apply_train_entry(x, base, base_prov, layer);
  }
  if (const Entry* e = top.find("models")) {
    if (e->value.IsMap())
      for (auto it = e->value.begin(); it != e->value.end(); ++it) {
        const std::string name = it->first.IsScalar() ? it->first.Scalar() : "";
        if (const auto m = model_file_.find(name); m != model_file_.end())
          fail(it->first.Mark(), child(e->path, quote_text(name)),
               fmt::format("model '{}' is already the batch's (defined at {}:{}); use it by "
                           "name in the jobs, or give this model a new name",
                           name, m->second, line_col(models_.at(name).second)));
      }
    parse_models(*e);
  }
  Workload added;
  parse_jobs(jobs, base, base_prov, added);
  if (w.jobs.size() + added.jobs.size() > static_cast<std::size_t>(limits::kJobs))
    fail(jobs.mark(), jobs.path,
         fmt::format("the batch would have {} jobs (valid: at most {} jobs in a batch)",
                     w.jobs.size() + added.jobs.size(), limits::kJobs));
  if (options_.check_data_files && options_.check_data_contents) {
    if (data != nullptr) {
      check_data(*train_entry, train, added.jobs);
      check_data(*val_entry, val, added.jobs);
    } else {
      // The batch's data against the new jobs (vocabulary, length), blamed on `jobs:`.
      check_data(jobs, w.train_data, added.jobs);
      check_data(jobs, w.val_data, added.jobs);
    }
  } else if (options_.check_data_files) {
    check_record_starts(data != nullptr ? *train_entry : jobs,
                        data != nullptr ? train : w.train_data, added.jobs, std::nullopt);
    check_record_starts(data != nullptr ? *val_entry : jobs, data != nullptr ? val : w.val_data,
                        added.jobs, std::nullopt);
  }
  for (auto& job : added.jobs) {
    job.train_data = train;
    job.val_data = val;
    w.jobs.push_back(std::move(job));
  }
}

}  // namespace

std::vector<std::int64_t> SelectionSettings::rung_steps() const {
  std::vector<std::int64_t> r;
  if (!enabled()) return r;
  std::int64_t step = min_steps;
  for (std::int64_t k = 0; k < max_rungs; ++k, step *= reduction_factor) r.push_back(step);
  return r;
}

const std::vector<std::string>& known_strategies() {
  return parallel::strategy_names();
}

std::string compact_number(double value) {
  if (value == 0) return "0";
  const double a = std::fabs(value);
  if (a >= 0.01 && a < 1e6) return fmt::format("{}", value);
  // The shortest scientific form that reads back exactly, without padding: 3e-4, 2.5e-5.
  std::string s;
  for (int precision = 0; precision <= 17; ++precision) {
    s = fmt::format("{:.{}e}", value, precision);
    if (std::strtod(s.c_str(), nullptr) == value) break;
  }
  const std::size_t e = s.find('e');
  const int exponent = std::stoi(s.substr(e + 1));
  return fmt::format("{}e{}", s.substr(0, e), exponent);
}

std::string default_job_id(const std::string& model_name, double lr, std::int64_t batch_size) {
  return fmt::format("{}-lr{}-bs{}", model_name, compact_number(lr), batch_size);
}

Workload parse_workload(const std::string& yaml, const fs::path& source,
                        const LoadOptions& options) {
  if (yaml.size() > limits::kFileBytes)
    throw InputError(fmt::format("{}: the workload file is {} bytes (valid: at most {})",
                                 source.string(), yaml.size(), limits::kFileBytes));
  fs::path base = source.parent_path();
  if (base.empty()) base = ".";
  Parser parser(source.string(), base, options);
  Workload w = parser.parse(yaml);
  w.source = source;
  w.own_jobs = w.jobs.size();
  w.source_text = yaml;
  return w;
}

Workload load_workload(const fs::path& path, const LoadOptions& options) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(fmt::format("{}: workload file does not exist", path.string()));
  if (!fs::is_regular_file(path, ec))
    throw InputError(fmt::format("{}: workload file is not a regular file", path.string()));
  const std::uintmax_t bytes = fs::file_size(path, ec);
  if (!ec && bytes > limits::kFileBytes)
    throw InputError(fmt::format("{}: the workload file is {} bytes (valid: at most {})",
                                 path.string(), bytes, limits::kFileBytes));
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw IoError(fmt::format("{}: cannot read workload file", path.string()));
  return parse_workload(text.str(), path, options);
}

Workload add_submissions(const Workload& workload, const std::vector<Submission>& submissions,
                         const LoadOptions& options) {
  if (workload.source_text.empty() || workload.own_jobs > workload.jobs.size())
    throw Error(fmt::format(
        "{}: add_submissions needs the batch as load_workload made it (its text and own jobs; "
        "got {} own of {} jobs, {} bytes of text)",
        workload.source.string(), workload.own_jobs, workload.jobs.size(),
        workload.source_text.size()));
  // The batch's text again, for what its Workload does not keep (models by name, defaults,
  // where each id was defined). Its data and model directories are the batch's as loaded.
  LoadOptions quiet;
  quiet.check_data_files = false;
  for (const auto& j : workload.jobs)
    if (!j.init_from.empty()) quiet.model_dirs[j.model_name] = j.init_from;
  fs::path base = workload.source.parent_path();
  if (base.empty()) base = ".";
  Parser parser(workload.source.string(), base, quiet);
  const std::size_t reparsed = parser.parse(workload.source_text).jobs.size();
  if (reparsed != workload.own_jobs)
    throw Error(fmt::format("{}: the batch's own text gives {} jobs, but it was loaded with {}",
                            workload.source.string(), reparsed, workload.own_jobs));
  Workload w = workload;
  // Its own jobs come first; jobs of submissions it may already hold are made again below.
  w.jobs.resize(workload.own_jobs);
  for (std::size_t i = 0; i < submissions.size(); ++i)
    parser.add_submission(submissions[i], i + 1 == submissions.size() ? options : quiet, w);
  return w;
}

const JobSpec& find_job(const Workload& workload, const std::string& id) {
  Keys ids;
  for (const auto& j : workload.jobs) {
    if (j.id == id) return j;
    ids.push_back(j.id);
  }
  throw InputError(fmt::format("{}: --job: unknown job '{}' ({}valid: {})",
                               workload.source.string(), id, suggestion(id, ids), join(ids)));
}

}  // namespace saturn
