// safetensors files (the Hugging Face weight format), read and written here without a library:
// an 8-byte little-endian header length N, N bytes of JSON
//   {"__metadata__": {"k": "v", ...}, "<name>": {"dtype": "BF16", "shape": [r, c],
//    "data_offsets": [begin, end]}, ...}
// then the raw little-endian tensor bytes, offsets relative to the end of the header.
// The reader is as strict as the format's reference library: the header is one JSON object
// (padded with spaces at most, no NUL, no name twice), every size matches its dtype and shape,
// and the tensors tile the data exactly (no overlap, no gap, no trailing bytes). Every error
// names the file and the tensor. It reads boxes (hyperslabs)
// of a tensor, so that a rank reads only the part of a tensor it holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/byte_hash.hpp"
#include "runtime/core/files.hpp"

namespace saturn::hf {

// The dtypes of the safetensors format. Every one is accepted in a header (sizes are checked);
// only F32, F16 and BF16 can be read as float32.
enum class StDtype {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2
};
const char* dtype_name(StDtype d);
std::size_t dtype_size(StDtype d);
bool readable_as_float(StDtype d);  // F32, F16, BF16

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // absolute byte offsets in the file
  std::uint64_t end = 0;
  std::int64_t numel() const;
};

// The largest header accepted (the format's own reference reader uses the same bound).
inline constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;

// One .safetensors file, its header parsed and checked on construction (InputError naming the
// file and tensor for a malformed header, and for a path that is missing or not a regular file;
// IoError when a read fails).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::filesystem::path path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, StTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const StTensor* find(const std::string& name) const;  // nullptr when absent

  // Reads the box [start, start + count) per dimension of tensor `name` into `out` (row-major,
  // count[0] * count[1] * ... floats), converted to float32 (exactly: F16 and BF16 widen).
  // InputError when the tensor is absent, its dtype is not F32/F16/BF16, or the box does not
  // fit its shape; IoError when the read fails.
  void read_box(const std::string& name, const std::vector<std::int64_t>& start,
                const std::vector<std::int64_t>& count, float* out) const;
  // Tensor bytes read so far by read_box (what a rank's share of a model costs it).
  std::uint64_t bytes_read() const { return bytes_read_; }
  // Reads the whole file once, front to back, into `hash`, checking on the way that every value
  // of the tensors named in `checked` (F32, F16, BF16 or F64) is finite (InputError naming the
  // file, the tensor and the value otherwise).
  void scan(ByteHash& hash, const std::set<std::string>& checked) const;

 private:
  StTensor parse_entry(const std::string& name, const nlohmann::json& entry,
                       std::uint64_t data_begin, std::uint64_t data_size) const;

  std::filesystem::path path_;
  InputFile file_;
  std::uint64_t data_begin_ = 0;  // 8 + the header's length
  mutable std::uint64_t bytes_read_ = 0;
  std::map<std::string, StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a Hugging Face model directory: DIR/model.safetensors, or the shards listed
// by DIR/model.safetensors.index.json ({"weight_map": {"<tensor>": "<file>", ...}}), each
// shard's header read once (InputError when the index names a tensor its shard lacks).
class SafetensorsSet {
 public:
  explicit SafetensorsSet(const std::filesystem::path& dir);
  const std::filesystem::path& dir() const { return dir_; }
  // What the set was read from: model.safetensors or model.safetensors.index.json.
  const std::filesystem::path& source() const { return source_; }
  const StTensor* find(const std::string& name) const;            // nullptr when absent
  const SafetensorsFile& file_of(const std::string& name) const;  // InputError when absent
  std::vector<std::string> names() const;                         // sorted
  std::uint64_t bytes_read() const;                               // over every file
  // Every file of the set, in the order first named.
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  void read_box(const std::string& name, const std::vector<std::int64_t>& start,
                const std::vector<std::int64_t>& count, float* out) const {
    file_of(name).read_box(name, start, count, out);
  }

 private:
  std::filesystem::path dir_, source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

// Writes one float32 safetensors file: the tensors are declared up front (the header precedes
// the data), then their data is given in that order, one tensor at a time. Written to OUT.tmp
// and renamed by finish(); destroyed unfinished, it removes the .tmp file.
class SafetensorsWriter {
 public:
  using Declared = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;
  SafetensorsWriter(std::filesystem::path out, const Declared& tensors,
                    const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  // The next declared tensor's data, whole or in consecutive parts (a stacked tensor written
  // part by part); true when the tensor is complete. Error when the name is not the one
  // expected or the parts exceed its size.
  bool write(const std::string& name, const float* data, std::size_t elements);
  void finish();
  std::uint64_t data_bytes() const { return data_bytes_; }

 private:
  std::filesystem::path out_, tmp_;
  Declared tensors_;
  std::size_t next_ = 0;
  std::uint64_t written_in_next_ = 0;  // elements of tensors_[next_] written so far
  std::uint64_t data_bytes_ = 0;
  std::FILE* file_ = nullptr;
  bool finished_ = false;
};

}  // namespace saturn::hf
