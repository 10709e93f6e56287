#include "runtime/hf/safetensors.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/core/error.hpp"
#include "runtime/core/json_file.hpp"

namespace saturn::hf {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is read and written from memory as is");

namespace {

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  std::size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {StDtype::kBool, "BOOL", 1}, {StDtype::kU8, "U8", 1},          {StDtype::kI8, "I8", 1},
    {StDtype::kI16, "I16", 2},   {StDtype::kU16, "U16", 2},        {StDtype::kF16, "F16", 2},
    {StDtype::kBF16, "BF16", 2}, {StDtype::kI32, "I32", 4},        {StDtype::kU32, "U32", 4},
    {StDtype::kF32, "F32", 4},   {StDtype::kF64, "F64", 8},        {StDtype::kI64, "I64", 8},
    {StDtype::kU64, "U64", 8},   {StDtype::kF8E4M3, "F8_E4M3", 1}, {StDtype::kF8E5M2, "F8_E5M2", 1},
};

const DtypeInfo& info(StDtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i;
  throw Error("internal: unknown safetensors dtype");
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal half: mant * 2^-24, exact in float32.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31)
    bits = sign | 0x7f800000u | (mant << 13);  // inf, nan (payload kept)
  else
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

}  // namespace

const char* dtype_name(StDtype d) {
  return info(d).name;
}
std::size_t dtype_size(StDtype d) {
  return info(d).size;
}
bool readable_as_float(StDtype d) {
  return d == StDtype::kF32 || d == StDtype::kF16 || d == StDtype::kBF16;
}

std::int64_t StTensor::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(fs::path path) : path_(std::move(path)), file_(path_) {
  const std::string file = path_.string();
  const std::uint64_t size = file_.size();
  auto bad = [&](const std::string& what) {
    throw InputError(fmt::format("{}: not a valid safetensors file: {}", file, what));
  };
  if (size < 8) bad(fmt::format("{} bytes, shorter than the 8-byte header length", size));
  std::uint64_t header_len = 0;
  file_.read_at(&header_len, 8, 0, "the header length");
  if (header_len > kMaxHeaderBytes)
    bad(fmt::format("header length {} exceeds the limit of {} bytes", header_len, kMaxHeaderBytes));
  if (header_len > size - 8)
    bad(fmt::format("header length {} runs past the end of the {}-byte file", header_len, size));
  std::string text(header_len, '\0');
  file_.read_at(text.data(), header_len, 8, "the header");
  // As strict as the format's reference reader: the header is one JSON object, padded with
  // spaces at most. A NUL would end nlohmann's input early and hide what follows it.
  if (text.empty() || text.front() != '{')
    bad("the header is not a JSON object (it does not start with '{')");
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    bad(fmt::format("the header holds a NUL byte at offset {} (valid padding: spaces)", nul));
  std::set<std::string> names;
  std::string duplicate;
  const auto note_keys = [&](int depth, nlohmann::json::parse_event_t event,
                             nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, note_keys);
  } catch (const nlohmann::json::exception& e) {
    bad(fmt::format("the header is not JSON ({})", e.what()));
  }
  if (!header.is_object()) bad("the header is not a JSON object");
  if (!duplicate.empty()) bad(fmt::format("the header names '{}' twice", duplicate));
  const std::uint64_t data_begin = 8 + header_len, data_size = size - data_begin;
  data_begin_ = data_begin;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) bad(fmt::format("__metadata__.{} is not a string", k));
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    tensors_.emplace(name, parse_entry(name, entry, data_begin, data_size));
  }
  // The tensors tile the data exactly, in offset order: no byte shared by two tensors, none
  // between them, none after the last (the reference reader refuses each).
  std::vector<const StTensor*> by_offset;
  for (const auto& [name, t] : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const StTensor* a, const StTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t at = data_begin;
  for (const StTensor* t : by_offset) {
    if (t->begin != at)
      throw InputError(fmt::format(
          "{}: tensor '{}': not a valid safetensors entry: data_offsets [{}, {}] {} (each "
          "tensor's data must start where the previous one's ends)",
          file, t->name, t->begin - data_begin, t->end - data_begin,
          t->begin < at
              ? fmt::format("overlap the tensor before it, which ends at {}", at - data_begin)
              : fmt::format("leave bytes {}..{} unused", at - data_begin, t->begin - data_begin)));
    at = t->end;
  }
  if (at != size)
    bad(
        fmt::format("{} bytes after the last tensor's data (the data holds {} bytes, the tensors "
                    "{})",
                    size - at, data_size, at - data_begin));
}

StTensor SafetensorsFile::parse_entry(const std::string& name, const nlohmann::json& entry,
                                      std::uint64_t data_begin, std::uint64_t data_size) const {
  auto bad_tensor = [&](const std::string& what) {
    throw InputError(fmt::format("{}: tensor '{}': not a valid safetensors entry: {}",
                                 path_.string(), name, what));
  };
  if (!entry.is_object()) bad_tensor("expected an object");
  for (const auto& [k, v] : entry.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      bad_tensor(fmt::format("unknown field '{}'", k));
  if (!entry.contains("dtype") || !entry["dtype"].is_string()) bad_tensor("no dtype string");
  StTensor t;
  t.name = name;
  const std::string dt = entry["dtype"].get<std::string>();
  bool known = false;
  for (const auto& i : kDtypes)
    if (dt == i.name) {
      t.dtype = i.dtype;
      known = true;
    }
  if (!known) bad_tensor(fmt::format("unknown dtype '{}'", dt));
  if (!entry.contains("shape") || !entry["shape"].is_array()) bad_tensor("no shape array");
  std::uint64_t numel = 1;
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_unsigned()) bad_tensor(fmt::format("shape entry {} is not a size", d.dump()));
    const auto n = d.get<std::uint64_t>();
    if (n > 0 && numel > std::numeric_limits<std::uint64_t>::max() / 16 / n)
      bad_tensor("shape too large");
    numel *= n;
    t.shape.push_back(static_cast<std::int64_t>(n));
  }
  const auto& off = entry.contains("data_offsets") ? entry["data_offsets"] : nlohmann::json();
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    bad_tensor("data_offsets is not [begin, end]");
  const auto b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
  if (b > e || e > data_size)
    bad_tensor(fmt::format("data_offsets [{}, {}] outside the {} data bytes", b, e, data_size));
  const std::uint64_t want = numel * dtype_size(t.dtype);
  if (e - b != want)
    bad_tensor(fmt::format("data_offsets [{}, {}] hold {} bytes; {} {} needs {}", b, e, e - b, dt,
                           shape_text(t.shape), want));
  t.begin = data_begin + b;
  t.end = data_begin + e;
  return t;
}

const StTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read_box(const std::string& name, const std::vector<std::int64_t>& start,
                               const std::vector<std::int64_t>& count, float* out) const {
  const StTensor* t = find(name);
  if (t == nullptr) throw InputError(fmt::format("{}: no tensor '{}'", path_.string(), name));
  if (!readable_as_float(t->dtype))
    throw InputError(fmt::format("{}: tensor '{}' has dtype {} (valid for weights: F32, F16, BF16)",
                                 path_.string(), name, dtype_name(t->dtype)));
  const std::size_t nd = t->shape.size();
  if (start.size() != nd || count.size() != nd)
    throw InputError(fmt::format("{}: tensor '{}' of shape {}: a box of {} dimensions asked for",
                                 path_.string(), name, shape_text(t->shape), start.size()));
  for (std::size_t d = 0; d < nd; ++d)
    if (start[d] < 0 || count[d] < 0 || start[d] + count[d] > t->shape[d])
      throw InputError(fmt::format(
          "{}: tensor '{}' of shape {}: box start {} count {} does not fit", path_.string(), name,
          shape_text(t->shape), shape_text(start), shape_text(count)));
  std::int64_t total = 1;
  for (auto c : count) total *= c;
  if (total == 0) return;
  // Row-major strides; the box is read as runs of contiguous elements: from the first
  // dimension k after which every dimension is whole, a run is count[k] x (the rest).
  std::vector<std::int64_t> stride(nd, 1);
  for (std::size_t d = nd; d-- > 1;) stride[d - 1] = stride[d] * t->shape[d];
  std::size_t k = nd == 0 ? 0 : nd - 1;
  while (k > 0 && count[k] == t->shape[k]) --k;
  const std::int64_t run = nd == 0 ? 1 : count[k] * stride[k];
  const std::size_t esize = dtype_size(t->dtype);
  std::vector<std::uint16_t> staging;
  std::vector<std::int64_t> idx(k, 0);  // position in the outer dimensions [0, k)
  const std::string what = fmt::format("tensor '{}'", name);
  float* dst = out;
  for (;;) {
    std::int64_t elem = nd == 0 ? 0 : start[k] * stride[k];
    for (std::size_t d = 0; d < k; ++d) elem += (start[d] + idx[d]) * stride[d];
    const std::uint64_t at = t->begin + static_cast<std::uint64_t>(elem) * esize;
    if (t->dtype == StDtype::kF32) {
      file_.read_at(dst, static_cast<std::size_t>(run) * 4, at, what);
    } else {
      // Half-precision runs are widened through a bounded staging buffer.
      constexpr std::int64_t kChunk = 1 << 20;
      for (std::int64_t done = 0; done < run; done += kChunk) {
        const std::int64_t n = std::min(kChunk, run - done);
        staging.resize(static_cast<std::size_t>(n));
        file_.read_at(staging.data(), static_cast<std::size_t>(n) * 2,
                      at + static_cast<std::uint64_t>(done) * 2, what);
        float* o = dst + done;
        if (t->dtype == StDtype::kBF16)
          for (std::int64_t i = 0; i < n; ++i)
            o[i] = bf16_to_f32(staging[static_cast<std::size_t>(i)]);
        else
          for (std::int64_t i = 0; i < n; ++i)
            o[i] = f16_to_f32(staging[static_cast<std::size_t>(i)]);
      }
    }
    dst += run;
    bytes_read_ += static_cast<std::uint64_t>(run) * esize;
    // Next outer index (odometer over dimensions [0, k)).
    std::size_t d = k;
    while (d > 0) {
      --d;
      if (++idx[d] < count[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (k == 0) return;
  }
}

namespace {

// The index of the first non-finite value among n little-endian values of `dtype` at `p`, or n.
std::size_t first_nonfinite(StDtype dtype, const unsigned char* p, std::size_t n) {
  const auto all_ones = [&](auto word_type, auto mask) {
    using W = decltype(word_type);
    for (std::size_t i = 0; i < n; ++i) {
      W w;
      std::memcpy(&w, p + i * sizeof(W), sizeof(W));
      if ((w & static_cast<W>(mask)) == static_cast<W>(mask)) return i;
    }
    return n;
  };
  switch (dtype) {
    case StDtype::kF32:
      return all_ones(std::uint32_t{}, 0x7f800000u);
    case StDtype::kF16:
      return all_ones(std::uint16_t{}, 0x7c00u);
    case StDtype::kBF16:
      return all_ones(std::uint16_t{}, 0x7f80u);
    case StDtype::kF64:
      return all_ones(std::uint64_t{}, 0x7ff0000000000000ull);
    default:
      return n;  // integer or 8-bit float tensors are not weights the engine reads
  }
}

double value_at(StDtype dtype, const unsigned char* p) {
  std::uint16_t h = 0;
  switch (dtype) {
    case StDtype::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case StDtype::kF64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case StDtype::kF16:
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    default:
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
  }
}

}  // namespace

void SafetensorsFile::scan(ByteHash& hash, const std::set<std::string>& checked) const {
  constexpr std::size_t kChunk = std::size_t{8} << 20;  // a multiple of every element size
  std::vector<unsigned char> buffer(kChunk);
  const auto read_range = [&](std::uint64_t begin, std::uint64_t end, const StTensor* t) {
    for (std::uint64_t at = begin; at < end;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, end - at));
      file_.read_at(buffer.data(), n, at, t ? fmt::format("tensor '{}'", t->name) : "the header");
      hash.update(buffer.data(), n);
      if (t != nullptr && checked.count(t->name)) {
        const std::size_t esize = dtype_size(t->dtype);
        const std::size_t bad = first_nonfinite(t->dtype, buffer.data(), n / esize);
        if (bad < n / esize)
          throw InputError(fmt::format(
              "{}: tensor '{}' holds a non-finite value ({}) at element {}: Saturn trains only "
              "from finite weights (a loss of NaN from the first step)",
              path_.string(), t->name, value_at(t->dtype, buffer.data() + bad * esize),
              (at - t->begin) / esize + bad));
      }
      at += n;
    }
  };
  read_range(0, data_begin_, nullptr);
  std::vector<const StTensor*> by_offset;
  for (const auto& [name, t] : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const StTensor* a, const StTensor* b) { return a->begin < b->begin; });
  for (const StTensor* t : by_offset) read_range(t->begin, t->end, t);
}

SafetensorsSet::SafetensorsSet(const fs::path& dir) : dir_(dir) {
  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  std::error_code ec;
  // symlink_status: a dangling link or a loop where the file belongs is named by InputFile, not
  // mistaken for "no weights here".
  const bool has_index = fs::exists(fs::symlink_status(index, ec));
  const bool has_single = fs::exists(fs::symlink_status(single, ec));
  // Both: one is left over from another model (an interrupted copy, an export over an older
  // one); transformers would read model.safetensors, an index-first reader the shards.
  if (has_index && has_single)
    throw InputError(fmt::format(
        "{}: holds both model.safetensors and model.safetensors.index.json, so which weights are "
        "the model's is ambiguous (transformers reads model.safetensors); remove the stale one",
        dir.string()));
  if (has_index) {
    source_ = index;
    const nlohmann::json j = read_json_file(index, kMaxHeaderBytes);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw InputError(fmt::format("{}: no \"weight_map\" object", index.string()));
    std::map<std::string, const SafetensorsFile*> by_file;
    for (const auto& [tensor, f] : j["weight_map"].items()) {
      if (!f.is_string())
        throw InputError(
            fmt::format("{}: weight_map.{}: expected a file name", index.string(), tensor));
      const std::string shard = f.get<std::string>();
      if (shard.empty() || fs::path(shard).has_parent_path() || shard == "." || shard == "..")
        throw InputError(fmt::format("{}: weight_map.{}: '{}' is not a file name in the directory",
                                     index.string(), tensor, shard));
      auto it = by_file.find(shard);
      if (it == by_file.end()) {
        files_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
        it = by_file.emplace(shard, files_.back().get()).first;
      }
      if (it->second->find(tensor) == nullptr)
        throw InputError(fmt::format("{}: weight_map puts '{}' in {}, which has no such tensor",
                                     index.string(), tensor, (dir / shard).string()));
      where_[tensor] = it->second;
    }
  } else if (has_single) {
    source_ = single;
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& [name, t] : files_.back()->tensors()) where_[name] = files_.back().get();
  } else {
    throw InputError(fmt::format(
        "{}: no model.safetensors or model.safetensors.index.json (weights in other formats, "
        "e.g. pytorch_model.bin, are not read: save them with safe_serialization)",
        dir.string()));
  }
}

const StTensor* SafetensorsSet::find(const std::string& name) const {
  const auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second->find(name);
}

const SafetensorsFile& SafetensorsSet::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end())
    throw InputError(fmt::format("{}: no tensor '{}'", source_.string(), name));
  return *it->second;
}

std::uint64_t SafetensorsSet::bytes_read() const {
  std::uint64_t n = 0;
  for (const auto& f : files_) n += f->bytes_read();
  return n;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> n;
  for (const auto& [name, f] : where_) n.push_back(name);
  return n;
}

SafetensorsWriter::SafetensorsWriter(fs::path out, const Declared& tensors,
                                     const std::map<std::string, std::string>& metadata)
    : out_(std::move(out)), tensors_(tensors) {
  tmp_ = out_;
  tmp_ += ".tmp";
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& [name, shape] : tensors_) {
    std::uint64_t n = 4;
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  if (!out_.parent_path().empty()) fs::create_directories(out_.parent_path());
  file_ = std::fopen(tmp_.string().c_str(), "wb");
  if (file_ == nullptr)
    throw IoError(fmt::format("cannot write {}: {}", tmp_.string(), std::strerror(errno)));
  const std::uint64_t len = text.size();
  if (std::fwrite(&len, 8, 1, file_) != 1 ||
      std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    const std::string why = std::strerror(errno);
    std::fclose(file_);  // the destructor does not run for a constructor that throws
    file_ = nullptr;
    std::error_code ec;
    fs::remove(tmp_, ec);
    throw IoError(fmt::format("cannot write {}: {}", tmp_.string(), why));
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) {
    std::error_code ec;
    fs::remove(tmp_, ec);
  }
}

bool SafetensorsWriter::write(const std::string& name, const float* data, std::size_t elements) {
  if (next_ >= tensors_.size() || tensors_[next_].first != name)
    throw Error(fmt::format("{}: tensor '{}' written out of the declared order (expected {})",
                            out_.string(), name,
                            next_ < tensors_.size() ? "'" + tensors_[next_].first + "'" : "none"));
  std::uint64_t n = 1;
  for (auto d : tensors_[next_].second) n *= static_cast<std::uint64_t>(d);
  if (written_in_next_ + elements > n)
    throw Error(fmt::format("{}: tensor '{}' declared with {} elements, given {}", out_.string(),
                            name, n, written_in_next_ + elements));
  if (std::fwrite(data, sizeof(float), elements, file_) != elements)
    throw IoError(fmt::format("cannot write {}: {}", tmp_.string(), std::strerror(errno)));
  data_bytes_ += elements * sizeof(float);
  written_in_next_ += elements;
  if (written_in_next_ < n) return false;
  written_in_next_ = 0;
  ++next_;
  return true;
}

void SafetensorsWriter::finish() {
  if (next_ != tensors_.size())
    throw Error(fmt::format("{}: {} of {} declared tensors written", out_.string(), next_,
                            tensors_.size()));
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0)
    throw IoError(fmt::format("cannot write {}: {}", tmp_.string(), std::strerror(errno)));
  std::error_code ec;
  fs::rename(tmp_, out_, ec);
  if (ec)
    throw IoError(
        fmt::format("cannot rename {} to {}: {}", tmp_.string(), out_.string(), ec.message()));
  finished_ = true;
}

}  // namespace saturn::hf
