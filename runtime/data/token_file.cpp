#include "runtime/data/token_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <span>
#include <system_error>

#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"

namespace saturn::data {

// The llm.c format is little-endian and we map it in place.
static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; a big-endian host would need byte swapping");

namespace fs = std::filesystem;

namespace {

constexpr std::array<unsigned char, 8> kHdf5Signature = {0x89, 'H',  'D',  'F',
                                                         '\r', '\n', 0x1a, '\n'};

std::string errno_text() {
  return std::strerror(errno);
}

// A missing or non-regular input is the user's mistake (exit 2), not an I/O failure.
void require_regular_file(const fs::path& path) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!fs::exists(st)) throw InputError(fmt::format("data file {} does not exist", path.string()));
  if (!fs::is_regular_file(st))
    throw InputError(fmt::format("data file {} is not a regular file", path.string()));
}

// Closes a POSIX file descriptor on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Silences HDF5's automatic error-stack printing while we probe files, restoring it after:
// our own exceptions say what went wrong.
class Hdf5Quiet {
 public:
  Hdf5Quiet() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Hdf5Quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  Hdf5Quiet(const Hdf5Quiet&) = delete;
  Hdf5Quiet& operator=(const Hdf5Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// Owns an HDF5 identifier.
class Hdf5Id {
 public:
  Hdf5Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hdf5Id() {
    if (id_ >= 0) close_(id_);
  }
  Hdf5Id(const Hdf5Id&) = delete;
  Hdf5Id& operator=(const Hdf5Id&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

std::string describe_hdf5_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::size_t bits = H5Tget_size(type) * 8;
  if (cls == H5T_INTEGER)
    return fmt::format("{}{}", H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bits);
  if (cls == H5T_FLOAT) return fmt::format("float{}", bits);
  return "a non-integer type";
}

// The last step of an atomic write: the complete temporary file replaces `path`.
void rename_into_place(const fs::path& tmp, const fs::path& path) {
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw IoError(
        fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
  }
}

}  // namespace

const char* token_format_name(TokenFormat format) {
  return format == TokenFormat::kLlmc ? "llm.c" : "hdf5";
}

TokenFormat detect_token_format(const fs::path& path) {
  require_regular_file(path);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw IoError(fmt::format("cannot open data file {}: {}", path.string(), errno_text()));
  std::array<unsigned char, 8> head{};
  const std::size_t got = std::fread(head.data(), 1, head.size(), f);
  std::fclose(f);
  if (got == 0) throw InputError(fmt::format("data file {} is empty", path.string()));
  if (got >= 4) {
    std::int32_t magic = 0;
    std::memcpy(&magic, head.data(), sizeof magic);
    if (magic == kLlmcMagic) return TokenFormat::kLlmc;
  }
  if (got == head.size() && head == kHdf5Signature) return TokenFormat::kHdf5;
  {
    // HDF5 files with a user block carry the signature at a later offset.
    Hdf5Quiet quiet;
    if (H5Fis_hdf5(path.c_str()) > 0) return TokenFormat::kHdf5;
  }
  std::int32_t first = 0;
  std::memcpy(&first, head.data(), std::min<std::size_t>(got, sizeof first));
  throw InputError(fmt::format(
      "data file {} is not a token file: bad magic {} (valid: an llm.c token file, whose first "
      "int32 is {}, or an HDF5 file with a /tokens dataset; `saturn data prepare` makes them)",
      path.string(), first, kLlmcMagic));
}

struct TokenArray::Storage {
  void* map = nullptr;  // llm.c: the whole file, mapped
  std::size_t map_bytes = 0;
  std::vector<std::uint16_t> u16;  // HDF5 uint16 / in-memory
  std::vector<std::uint32_t> u32;  // HDF5 uint32 / in-memory
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() {
    if (map) ::munmap(map, map_bytes);
  }
};

TokenArray TokenArray::open(const fs::path& path, std::uint32_t vocab_size) {
  TokenArray a;
  a.name_ = path.string();
  const TokenFormat format = detect_token_format(path);
  auto storage = std::make_shared<Storage>();
  if (format == TokenFormat::kLlmc) {
    const std::string file = path.string();
    Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) throw IoError(fmt::format("cannot open data file {}: {}", file, errno_text()));
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0)
      throw IoError(fmt::format("cannot stat data file {}: {}", file, errno_text()));
    const auto bytes = static_cast<std::uint64_t>(st.st_size);
    if (bytes < kLlmcHeaderBytes)
      throw InputError(
          fmt::format("data file {} is truncated: an llm.c header is {} bytes but the file has {}",
                      file, kLlmcHeaderBytes, bytes));
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (map == MAP_FAILED)
      throw IoError(fmt::format("cannot memory-map data file {}: {}", file, errno_text()));
    storage->map = map;
    storage->map_bytes = bytes;
    std::array<std::int32_t, kLlmcHeaderInts> header{};
    std::memcpy(header.data(), map, kLlmcHeaderBytes);
    if (header[1] != kLlmcVersion)
      throw InputError(
          fmt::format("data file {}: unsupported llm.c version {} (valid: {}, uint16 tokens)", file,
                      header[1], kLlmcVersion));
    if (header[2] < 0)
      throw InputError(
          fmt::format("data file {}: the header's token count is negative ({})", file, header[2]));
    const auto declared = static_cast<std::uint64_t>(header[2]);
    const std::uint64_t held = (bytes - kLlmcHeaderBytes) / sizeof(std::uint16_t);
    if (held < declared)
      throw InputError(fmt::format(
          "data file {} is truncated: the header says {} tokens but the file holds only {}", file,
          declared, held));
    const std::uint64_t expected = kLlmcHeaderBytes + declared * sizeof(std::uint16_t);
    if (bytes != expected)
      throw InputError(fmt::format(
          "data file {}: {} bytes follow the {} tokens the header declares (the file is {} bytes, "
          "expected {})",
          file, bytes - expected, declared, bytes, expected));
    const void* first = static_cast<const unsigned char*>(map) + kLlmcHeaderBytes;
    a.u16_ = static_cast<const std::uint16_t*>(first);
    a.size_ = declared;
  } else {
    const std::string file = path.string();
    Hdf5Quiet quiet;
    Hdf5Id f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!f.valid()) throw IoError(fmt::format("cannot open HDF5 data file {}", file));
    if (H5Lexists(f.get(), "tokens", H5P_DEFAULT) <= 0)
      throw InputError(fmt::format(
          "HDF5 data file {} has no dataset /tokens (valid: a 1-D uint16 or uint32 dataset "
          "named /tokens)",
          file));
    Hdf5Id d(H5Dopen2(f.get(), "/tokens", H5P_DEFAULT), H5Dclose);
    if (!d.valid())
      throw InputError(fmt::format(
          "HDF5 data file {}: /tokens is not a dataset (valid: a 1-D uint16 or uint32 dataset)",
          file));
    Hdf5Id type(H5Dget_type(d.get()), H5Tclose);
    const bool is_uint =
        H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_sign(type.get()) == H5T_SGN_NONE;
    const std::size_t width = H5Tget_size(type.get());
    if (!is_uint || (width != 2 && width != 4))
      throw InputError(fmt::format("HDF5 data file {}: /tokens has type {} (valid: uint16, uint32)",
                                   file, describe_hdf5_type(type.get())));
    Hdf5Id space(H5Dget_space(d.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank != 1)
      throw InputError(fmt::format(
          "HDF5 data file {}: /tokens has {} dimensions (valid: 1, a flat token stream)", file,
          rank));
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space.get(), &n, nullptr);
    herr_t status = 0;
    if (width == 2) {
      storage->u16.resize(n);
      if (n > 0)
        status =
            H5Dread(d.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, storage->u16.data());
      a.u16_ = storage->u16.data();
    } else {
      storage->u32.resize(n);
      if (n > 0)
        status =
            H5Dread(d.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, storage->u32.data());
      a.u32_ = storage->u32.data();
    }
    if (status < 0) throw IoError(fmt::format("cannot read /tokens from HDF5 data file {}", file));
    a.size_ = n;
  }
  a.storage_ = std::move(storage);
  if (vocab_size > 0) a.validate_vocab(vocab_size);
  return a;
}

TokenArray TokenArray::from_tokens(std::vector<std::uint32_t> tokens, std::string name) {
  auto storage = std::make_shared<Storage>();
  storage->u32 = std::move(tokens);
  TokenArray a;
  a.u32_ = storage->u32.data();
  a.size_ = storage->u32.size();
  a.storage_ = std::move(storage);
  a.name_ = std::move(name);
  return a;
}

void TokenArray::copy_to(std::uint64_t begin, std::uint64_t count, std::int32_t* out) const {
  if (begin > size_ || count > size_ - begin)
    throw Error(fmt::format("token range [{}, {}) is outside {} ({} tokens)", begin, begin + count,
                            name_, size_));
  if (u16_) {
    for (std::uint64_t k = 0; k < count; ++k) out[k] = u16_[begin + k];
  } else {
    for (std::uint64_t k = 0; k < count; ++k) out[k] = static_cast<std::int32_t>(u32_[begin + k]);
  }
}

void TokenArray::validate_vocab(std::uint32_t vocab_size) const {
  // uint16 tokens always fit a vocabulary of 65536 or more: skip the scan.
  if (vocab_size == 0 || (u16_ && vocab_size > std::numeric_limits<std::uint16_t>::max())) return;
  for (std::uint64_t i = 0; i < size_; ++i) {
    const std::uint32_t t = (*this)[i];
    if (t >= vocab_size)
      throw InputError(fmt::format(
          "data file {}: token {} at position {} is outside the model's vocabulary (valid: 0..{} "
          "for vocab_size {})",
          name_, t, i, vocab_size - 1, vocab_size));
  }
}

std::uint32_t TokenArray::max_token() const {
  // Branch-free loops over the raw arrays, so the compiler vectorises them (a memory-bound pass).
  std::uint32_t m = 0;
  if (u16_) {
    std::uint16_t m16 = 0;
    for (std::uint64_t i = 0; i < size_; ++i) m16 = std::max(m16, u16_[i]);
    m = m16;
  } else {
    for (std::uint64_t i = 0; i < size_; ++i) m = std::max(m, u32_[i]);
  }
  return m;
}

std::vector<std::uint32_t> read_tokens(const fs::path& path, std::uint32_t vocab_size) {
  const TokenArray a = TokenArray::open(path, vocab_size);
  std::vector<std::uint32_t> out(a.size());
  for (std::uint64_t i = 0; i < a.size(); ++i) out[i] = a[i];
  return out;
}

namespace {

// Writes `parts` (byte ranges, in order) to a temporary file beside `path`, synced, then renamed
// over `path`, so readers never see a partial file. Throws IoError naming the file.
void write_atomically(const fs::path& path,
                      std::initializer_list<std::span<const std::byte>> parts) {
  check_output_file(path);  // renamed over below: never over a FIFO, device or link
  const fs::path tmp = fs::path(path.string() + fmt::format(".tmp.{}", ::getpid()));
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw IoError(fmt::format("cannot create {}: {}", tmp.string(), errno_text()));
  bool ok = true;
  for (const auto& part : parts)
    ok = ok && (part.empty() || std::fwrite(part.data(), 1, part.size(), f) == part.size());
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const std::string reason = ok ? "" : errno_text();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw IoError(
        fmt::format("cannot write {}: {}", path.string(), reason.empty() ? errno_text() : reason));
  }
  rename_into_place(tmp, path);
}

}  // namespace

void write_llmc_tokens(const fs::path& path, std::span<const std::uint16_t> tokens) {
  if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw InputError(
        fmt::format("cannot write {}: {} tokens exceed the llm.c format's limit of {} per file",
                    path.string(), tokens.size(), std::numeric_limits<std::int32_t>::max()));
  std::array<std::int32_t, kLlmcHeaderInts> header{};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  write_atomically(path, {std::as_bytes(std::span(header)), std::as_bytes(tokens)});
}

fs::path loss_mask_path(const fs::path& token_file) {
  fs::path p = token_file;
  return p.replace_extension(".mask");
}

void write_loss_mask(const fs::path& path, std::span<const std::uint8_t> mask) {
  write_atomically(path, {std::as_bytes(mask)});
}

std::vector<std::uint8_t> read_loss_mask(const fs::path& path, std::uint64_t tokens) {
  require_regular_file(path);
  std::error_code ec;
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) throw IoError(fmt::format("cannot read loss mask {}: {}", path.string(), ec.message()));
  if (size != tokens)
    throw InputError(fmt::format(
        "loss mask {} holds {} bytes, but its token file has {} tokens (one byte per token: "
        "prepare the data again with `saturn data prepare --format jsonl`)",
        path.string(), size, tokens));
  std::vector<std::uint8_t> mask(tokens);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(mask.data()), static_cast<std::streamsize>(tokens));
  if (!in) throw IoError(fmt::format("cannot read loss mask {}", path.string()));
  for (std::size_t i = 0; i < mask.size(); ++i)
    if (mask[i] > 1)
      throw InputError(fmt::format("loss mask {}: byte {} is {} (valid: 0 or 1)", path.string(), i,
                                   static_cast<int>(mask[i])));
  return mask;
}

fs::path record_starts_path(const fs::path& token_file) {
  fs::path p = token_file;
  return p.replace_extension(".records");
}

void write_record_starts(const fs::path& path, std::span<const std::uint64_t> starts) {
  write_atomically(path, {std::as_bytes(starts)});
}

std::vector<std::uint64_t> read_record_starts(const fs::path& path, std::uint64_t tokens) {
  const std::string file = path.string();
  const char* again = "prepare the data again with `saturn data prepare --format jsonl`";
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (!fs::exists(st))
    throw InputError(fmt::format("record boundaries file {} does not exist ({})", file, again));
  if (!fs::is_regular_file(st))
    throw InputError(fmt::format("record boundaries file {} is not a regular file", file));
  const std::uint64_t size = fs::file_size(path, ec);
  if (ec) throw IoError(fmt::format("cannot read record boundaries {}: {}", file, ec.message()));
  if (size % sizeof(std::uint64_t) != 0)
    throw InputError(fmt::format(
        "record boundaries {} hold {} bytes, not a multiple of 8 (one uint64 per record: {})", file,
        size, again));
  std::vector<std::uint64_t> starts(size / sizeof(std::uint64_t));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(starts.data()), static_cast<std::streamsize>(size));
  if (!in) throw IoError(fmt::format("cannot read record boundaries {}", file));
  if (starts.empty() || starts[0] != 0)
    throw InputError(fmt::format("record boundaries {}: {} (the first record starts at 0: {})",
                                 file,
                                 starts.empty() ? std::string("the file holds no record")
                                                : fmt::format("the first start is {}", starts[0]),
                                 again));
  for (std::size_t i = 1; i < starts.size(); ++i)
    if (starts[i] <= starts[i - 1])
      throw InputError(fmt::format(
          "record boundaries {}: start {} is {}, not above start {} ({}): the starts must "
          "strictly increase ({})",
          file, i, starts[i], i - 1, starts[i - 1], again));
  if (starts.back() >= tokens)
    throw InputError(fmt::format(
        "record boundaries {}: record {} starts at token {}, but the token file has {} tokens "
        "(valid: starts below the token count: {})",
        file, starts.size() - 1, starts.back(), tokens, again));
  return starts;
}

void write_hdf5_tokens(const fs::path& path, std::span<const std::uint32_t> tokens) {
  check_output_file(path);
  const fs::path tmp = fs::path(path.string() + fmt::format(".tmp.{}", ::getpid()));
  auto fail = [&](const std::string& what) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw IoError(fmt::format("cannot write {}: {}", path.string(), what));
  };
  {
    Hdf5Quiet quiet;
    Hdf5Id f(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!f.valid()) fail(fmt::format("H5Fcreate of {} failed", tmp.string()));
    const hsize_t n = tokens.size();
    Hdf5Id space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    Hdf5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    // Chunks of 1 Mi tokens with deflate: a token stream compresses well and is read whole.
    const hsize_t chunk = std::max<hsize_t>(1, std::min<hsize_t>(n, hsize_t{1} << 20));
    // No modification times in the object header: the same tokens give the same bytes.
    if (!space.valid() || !dcpl.valid() || H5Pset_obj_track_times(dcpl.get(), false) < 0 ||
        (n > 0 && (H5Pset_chunk(dcpl.get(), 1, &chunk) < 0 || H5Pset_deflate(dcpl.get(), 4) < 0)))
      fail("cannot set up the /tokens dataset");
    Hdf5Id d(H5Dcreate2(f.get(), "/tokens", H5T_STD_U32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                        H5P_DEFAULT),
             H5Dclose);
    if (!d.valid()) fail("H5Dcreate2 of /tokens failed");
    if (n > 0 &&
        H5Dwrite(d.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data()) < 0)
      fail("H5Dwrite of /tokens failed (disk full?)");
    if (H5Fflush(f.get(), H5F_SCOPE_GLOBAL) < 0) fail("H5Fflush failed");
  }
  rename_into_place(tmp, path);
}

}  // namespace saturn::data
