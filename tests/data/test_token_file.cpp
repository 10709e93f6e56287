#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/data/token_file.hpp"
#include "tests/data/test_util.hpp"

namespace saturn::data {
namespace {

namespace fs = std::filesystem;
using saturn::testing::error_of;
using saturn::testing::read_file;
using saturn::testing::TempDir;
using saturn::testing::write_file;

std::vector<std::uint16_t> pattern(std::size_t n) {
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<std::uint16_t>((i * 7919) % 65536);
  return t;
}

void write_hdf5(const fs::path& path, hid_t file_type, hid_t mem_type, const void* data, hsize_t n,
                const char* name = "tokens") {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t s = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(f, name, file_type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (n > 0) {
    ASSERT_GE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0);
  }
  H5Dclose(d);
  H5Sclose(s);
  H5Fclose(f);
}

TEST(TokenFile, LlmcRoundTripAndHeaderLayout) {
  TempDir dir;
  const auto tokens = pattern(5000);
  const fs::path p = dir / "t.bin";
  write_llmc_tokens(p, tokens);
  const std::string bytes = read_file(p);
  ASSERT_EQ(bytes.size(), kLlmcHeaderBytes + 2 * tokens.size());
  std::int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 5000);
  for (std::size_t i = 3; i < kLlmcHeaderInts; ++i) {
    std::int32_t v = -1;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    ASSERT_EQ(v, 0) << "header int " << i;
  }
  EXPECT_EQ(detect_token_format(p), TokenFormat::kLlmc);
  const TokenArray a = TokenArray::open(p);
  ASSERT_EQ(a.size(), tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(a[i], tokens[i]) << i;
  const auto back = read_tokens(p);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), tokens.begin(), tokens.end()));
  std::vector<std::int32_t> out(10);
  a.copy_to(4990, 10, out.data());
  for (int k = 0; k < 10; ++k) EXPECT_EQ(out[k], tokens[4990 + k]);
  EXPECT_THROW(a.copy_to(4995, 10, out.data()), Error);
  // Nothing but the file itself is left in the directory (the temporary was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(TokenFile, EmptyTokenFileRoundTrips) {
  TempDir dir;
  write_llmc_tokens(dir / "e.bin", {});
  EXPECT_EQ(TokenArray::open(dir / "e.bin").size(), 0u);
}

TEST(TokenFile, OverwriteReplacesWholeFile) {
  TempDir dir;
  write_llmc_tokens(dir / "t.bin", pattern(100));
  write_llmc_tokens(dir / "t.bin", pattern(10));
  EXPECT_EQ(TokenArray::open(dir / "t.bin").size(), 10u);
}

TEST(TokenFile, WriteIntoMissingDirectoryIsIoError) {
  TempDir dir;
  const std::string msg =
      error_of<IoError>([&] { write_llmc_tokens(dir / "no/such/dir/t.bin", pattern(3)); });
  EXPECT_CONTAINS(msg, "no/such/dir/t.bin");
}

TEST(TokenFile, Hdf5Uint16AndUint32) {
  TempDir dir;
  const auto t16 = pattern(1000);
  write_hdf5(dir / "a.h5", H5T_STD_U16LE, H5T_NATIVE_UINT16, t16.data(), t16.size());
  EXPECT_EQ(detect_token_format(dir / "a.h5"), TokenFormat::kHdf5);
  const TokenArray a = TokenArray::open(dir / "a.h5");
  ASSERT_EQ(a.size(), t16.size());
  for (std::size_t i = 0; i < t16.size(); ++i) ASSERT_EQ(a[i], t16[i]);

  std::vector<std::uint32_t> t32 = {0, 1, 70000, 4000000000u, 255};
  write_hdf5(dir / "b.h5", H5T_STD_U32LE, H5T_NATIVE_UINT32, t32.data(), t32.size());
  EXPECT_EQ(read_tokens(dir / "b.h5"), t32);
  const std::string msg = error_of<InputError>([&] { TokenArray::open(dir / "b.h5", 256); });
  EXPECT_CONTAINS(msg, (dir / "b.h5").string());
  EXPECT_CONTAINS(msg, "token 70000 at position 2");
  EXPECT_CONTAINS(msg, "vocab_size 256");
}

// What `saturn data prepare --tokenizer` writes for vocabularies above 65536: read back by the
// loader's own reader, larger than one 1 Mi-token chunk, and empty.
TEST(TokenFile, Hdf5WriterRoundTrips) {
  TempDir dir;
  std::vector<std::uint32_t> t32((1u << 20) + 37);
  for (std::size_t i = 0; i < t32.size(); ++i)
    t32[i] = static_cast<std::uint32_t>(i * 2654435761u) % 150000u;
  t32.back() = 4294967295u;
  write_hdf5_tokens(dir / "big.h5", t32);
  EXPECT_EQ(detect_token_format(dir / "big.h5"), TokenFormat::kHdf5);
  EXPECT_EQ(read_tokens(dir / "big.h5"), t32);
  write_hdf5_tokens(dir / "empty.h5", {});
  EXPECT_TRUE(read_tokens(dir / "empty.h5").empty());
  // Written under a temporary name, renamed: nothing else is left in the directory.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 2u);
  EXPECT_CONTAINS(error_of<IoError>([&] { write_hdf5_tokens(dir / "no/such/t.h5", t32); }),
                  "no/such/t.h5");
}

TEST(TokenFile, Hdf5WithoutTokensOrWrongType) {
  TempDir dir;
  const std::vector<std::uint16_t> t = {1, 2, 3};
  write_hdf5(dir / "other.h5", H5T_STD_U16LE, H5T_NATIVE_UINT16, t.data(), t.size(), "ids");
  EXPECT_CONTAINS(error_of<InputError>([&] { TokenArray::open(dir / "other.h5"); }),
                  "has no dataset /tokens");
  const std::vector<float> f = {1, 2, 3};
  write_hdf5(dir / "float.h5", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, f.data(), f.size());
  const std::string msg = error_of<InputError>([&] { TokenArray::open(dir / "float.h5"); });
  EXPECT_CONTAINS(msg, "float.h5");
  EXPECT_CONTAINS(msg, "type float32 (valid: uint16, uint32)");
}

TEST(TokenFile, MissingFile) {
  TempDir dir;
  const std::string msg = error_of<InputError>([&] { TokenArray::open(dir / "nope.bin"); });
  EXPECT_CONTAINS(msg, (dir / "nope.bin").string());
  EXPECT_CONTAINS(msg, "does not exist");
  EXPECT_CONTAINS(error_of<InputError>([&] { TokenArray::open(dir.path()); }),
                  "not a regular file");
}

TEST(TokenFile, BadMagic) {
  TempDir dir;
  write_file(dir / "text.bin", "this is just some text, not tokens");
  const std::string msg = error_of<InputError>([&] { TokenArray::open(dir / "text.bin"); });
  EXPECT_CONTAINS(msg, (dir / "text.bin").string());
  EXPECT_CONTAINS(msg, "bad magic");
  EXPECT_CONTAINS(msg, "20240520");
  write_file(dir / "empty.bin", "");
  EXPECT_CONTAINS(error_of<InputError>([&] { TokenArray::open(dir / "empty.bin"); }), "is empty");
}

TEST(TokenFile, TruncatedTokens) {
  TempDir dir;
  const fs::path p = dir / "t.bin";
  write_llmc_tokens(p, pattern(100));
  fs::resize_file(p, kLlmcHeaderBytes + 2 * 90 + 1);  // 90 tokens and half of one
  const std::string msg = error_of<InputError>([&] { TokenArray::open(p); });
  EXPECT_CONTAINS(msg, p.string());
  EXPECT_CONTAINS(msg, "truncated: the header says 100 tokens but the file holds only 90");
}

TEST(TokenFile, TruncatedHeader) {
  TempDir dir;
  const fs::path p = dir / "t.bin";
  write_llmc_tokens(p, pattern(100));
  fs::resize_file(p, 100);
  const std::string msg = error_of<InputError>([&] { TokenArray::open(p); });
  EXPECT_CONTAINS(msg, "truncated: an llm.c header is 1024 bytes but the file has 100");
}

TEST(TokenFile, TrailingBytesAndBadVersion) {
  TempDir dir;
  const fs::path p = dir / "t.bin";
  write_llmc_tokens(p, pattern(100));
  fs::resize_file(p, kLlmcHeaderBytes + 2 * 100 + 6);
  EXPECT_CONTAINS(error_of<InputError>([&] { TokenArray::open(p); }),
                  "6 bytes follow the 100 tokens");
  write_llmc_tokens(p, pattern(4));
  std::string bytes = read_file(p);
  const std::int32_t version = 7;
  std::memcpy(bytes.data() + 4, &version, 4);
  write_file(p, bytes);
  EXPECT_CONTAINS(error_of<InputError>([&] { TokenArray::open(p); }),
                  "unsupported llm.c version 7 (valid: 1");
}

TEST(TokenFile, VocabularyCheck) {
  TempDir dir;
  const fs::path p = dir / "t.bin";
  std::vector<std::uint16_t> t(50, 65);
  t[37] = 300;
  write_llmc_tokens(p, t);
  EXPECT_NO_THROW(TokenArray::open(p));
  EXPECT_NO_THROW(TokenArray::open(p, 301));
  const std::string msg = error_of<InputError>([&] { TokenArray::open(p, 256); });
  EXPECT_CONTAINS(msg, p.string());
  EXPECT_CONTAINS(msg, "token 300 at position 37");
  EXPECT_CONTAINS(msg, "valid: 0..255");
}

}  // namespace
}  // namespace saturn::data
