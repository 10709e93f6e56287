#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/hf/safetensors.hpp"

namespace saturn::hf {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const fs::path d =
      fs::temp_directory_path() /
      ("saturn-st-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A file with raw header text and data bytes, for the malformed cases.
void write_raw(const fs::path& p, const std::string& header, const std::string& data,
               std::uint64_t claimed_len = 0) {
  std::ofstream os(p, std::ios::binary);
  const std::uint64_t len = claimed_len ? claimed_len : header.size();
  os.write(reinterpret_cast<const char*>(&len), 8);
  os << header << data;
}

TEST(Safetensors, BoxesOfA3dTensorAndAVector) {
  const fs::path dir = temp_dir();
  std::vector<float> t3(3 * 4 * 5), v(7);
  for (std::size_t i = 0; i < t3.size(); ++i) t3[i] = static_cast<float>(i);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = -static_cast<float>(i);
  {
    SafetensorsWriter w(dir / "a.safetensors", {{"t3", {3, 4, 5}}, {"v", {7}}}, {{"format", "pt"}});
    w.write("t3", t3.data(), t3.size());
    w.write("v", v.data(), v.size());
    w.finish();
  }
  const SafetensorsFile f(dir / "a.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_NE(f.find("t3"), nullptr);
  EXPECT_EQ(f.find("t3")->shape, (std::vector<std::int64_t>{3, 4, 5}));
  // Every box of a few sizes, against direct indexing.
  for (std::int64_t s0 = 0; s0 < 3; ++s0)
    for (std::int64_t c0 = 1; s0 + c0 <= 3; ++c0)
      for (std::int64_t s1 : {0, 1, 3})
        for (std::int64_t c1 : {1, 2, 4})
          for (std::int64_t s2 : {0, 2})
            for (std::int64_t c2 : {1, 3}) {
              if (s1 + c1 > 4 || s2 + c2 > 5) continue;
              std::vector<float> out(static_cast<std::size_t>(c0 * c1 * c2), 99.0f);
              f.read_box("t3", {s0, s1, s2}, {c0, c1, c2}, out.data());
              std::size_t k = 0;
              for (std::int64_t i = 0; i < c0; ++i)
                for (std::int64_t j = 0; j < c1; ++j)
                  for (std::int64_t l = 0; l < c2; ++l, ++k)
                    ASSERT_EQ(out[k],
                              t3[static_cast<std::size_t>(((s0 + i) * 4 + s1 + j) * 5 + s2 + l)])
                        << "box " << s0 << "," << s1 << "," << s2 << " / " << c0 << "," << c1 << ","
                        << c2;
            }
  std::vector<float> out(3);
  f.read_box("v", {2}, {3}, out.data());
  EXPECT_EQ(out, (std::vector<float>{-2, -3, -4}));
  EXPECT_THROW(f.read_box("v", {5}, {3}, out.data()), InputError);        // past the end
  EXPECT_THROW(f.read_box("nope", {0}, {1}, out.data()), InputError);     // absent
  EXPECT_THROW(f.read_box("v", {0, 0}, {1, 1}, out.data()), InputError);  // rank
  fs::remove_all(dir);
}

TEST(Safetensors, HalfPrecisionWidensExactly) {
  const fs::path dir = temp_dir();
  // bf16 1.5 = 0x3FC0; f16: 1.0 = 0x3C00, -2.0 = 0xC000, smallest subnormal 0x0001 = 2^-24,
  // max 0x7BFF = 65504, inf 0x7C00.
  const std::uint16_t bf[2] = {0x3FC0, 0xBF80};
  const std::uint16_t h[5] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0x7C00};
  std::string data(reinterpret_cast<const char*>(bf), 4);
  data.append(reinterpret_cast<const char*>(h), 10);
  write_raw(dir / "h.safetensors",
            R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
            R"("h":{"dtype":"F16","shape":[5],"data_offsets":[4,14]}})",
            data);
  const SafetensorsFile f(dir / "h.safetensors");
  std::vector<float> b(2), x(5);
  f.read_box("b", {0}, {2}, b.data());
  f.read_box("h", {0}, {5}, x.data());
  EXPECT_EQ(b, (std::vector<float>{1.5f, -1.0f}));
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(x[2], 0x1p-24f);
  EXPECT_EQ(x[3], 65504.0f);
  EXPECT_TRUE(std::isinf(x[4]));
  fs::remove_all(dir);
}

TEST(Safetensors, MalformedHeadersAreInputErrorsNamingFileAndTensor) {
  const fs::path dir = temp_dir();
  auto message = [&](const std::string& header, const std::string& data,
                     std::uint64_t claimed = 0) -> std::string {
    write_raw(dir / "bad.safetensors", header, data, claimed);
    try {
      SafetensorsFile f(dir / "bad.safetensors");
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string four(4, '\0');
  EXPECT_NE(message("{}", "", 1000).find("runs past the end"), std::string::npos);
  EXPECT_NE(message("[1]", "").find("not a JSON object"), std::string::npos);
  EXPECT_NE(message("{x", "").find("not JSON"), std::string::npos);
  const std::string m1 = message(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", four);
  EXPECT_NE(m1.find("bad.safetensors"), std::string::npos);
  EXPECT_NE(m1.find("'w'"), std::string::npos);
  EXPECT_NE(m1.find("needs 8"), std::string::npos) << m1;
  EXPECT_NE(message(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}})", four)
                .find("outside the 4 data bytes"),
            std::string::npos);
  EXPECT_NE(message(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", four)
                .find("unknown dtype 'Q4'"),
            std::string::npos);
  EXPECT_NE(message(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four)
                .find("not a size"),
            std::string::npos);
  EXPECT_NE(message(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", four)
                .find("unknown field 'x'"),
            std::string::npos);
  // A dtype the engine cannot widen: the header is fine, reading it as weights is not.
  write_raw(dir / "i.safetensors", R"({"w":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
            four);
  const SafetensorsFile f(dir / "i.safetensors");
  float out = 0;
  EXPECT_THROW(f.read_box("w", {0}, {1}, &out), InputError);
  fs::remove_all(dir);
}

TEST(Safetensors, IndexPointingAtAShardWithoutTheTensorIsRefused) {
  const fs::path dir = temp_dir();
  const float one = 1.0f;
  {
    SafetensorsWriter w(dir / "s1.safetensors", {{"a", {1}}}, {{"format", "pt"}});
    w.write("a", &one, 1);
    w.finish();
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}})";
  EXPECT_THROW(SafetensorsSet{dir}, InputError);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "../s1.safetensors"}})";
  EXPECT_THROW(SafetensorsSet{dir}, InputError);
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "s1.safetensors"}})";
  const SafetensorsSet set(dir);
  float got = 0;
  set.read_box("a", {0}, {1}, &got);
  EXPECT_EQ(got, 1.0f);
  fs::remove_all(dir);
}

TEST(Safetensors, UnfinishedWriterLeavesNothing) {
  const fs::path dir = temp_dir();
  {
    SafetensorsWriter w(dir / "u.safetensors", {{"a", {2}}}, {});
    const float x[2] = {1, 2};
    EXPECT_THROW(w.write("b", x, 2), Error);  // not the declared order
    EXPECT_FALSE(w.write("a", x, 1));         // a first part: the tensor is not whole yet
    EXPECT_THROW(w.write("a", x, 2), Error);  // past its declared size
    EXPECT_THROW(w.finish(), Error);          // a tensor not whole
  }
  EXPECT_FALSE(fs::exists(dir / "u.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "u.safetensors.tmp"));
  fs::remove_all(dir);
}

// A stacked tensor (Phi-3's qkv_proj) is written part by part and reads back whole.
TEST(Safetensors, TensorWrittenInPartsReadsBackWhole) {
  const fs::path dir = temp_dir();
  {
    SafetensorsWriter w(dir / "p.safetensors", {{"qkv", {3, 2}}, {"o", {1}}}, {{"format", "pt"}});
    const float q[2] = {1, 2}, kv[4] = {3, 4, 5, 6}, o[1] = {7};
    EXPECT_FALSE(w.write("qkv", q, 2));
    EXPECT_TRUE(w.write("qkv", kv, 4));
    EXPECT_TRUE(w.write("o", o, 1));
    w.finish();
  }
  const SafetensorsFile f(dir / "p.safetensors");
  std::vector<float> got(6);
  f.read_box("qkv", {1, 0}, {2, 2}, got.data());
  EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + 4), (std::vector<float>{3, 4, 5, 6}));
  fs::remove_all(dir);
}

// As strict as the format's reference reader (safetensors 0.4): the tensors tile the data
// exactly, the header is one object padded with spaces only, no name twice.
TEST(Safetensors, DataMustBeTiledExactlyAndTheHeaderClean) {
  const fs::path dir = temp_dir();
  auto message = [&](const std::string& header, const std::string& data) -> std::string {
    write_raw(dir / "bad.safetensors", header, data);
    try {
      SafetensorsFile f(dir / "bad.safetensors");
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  };
  const std::string eight(8, '\0'), twelve(12, '\0');
  const std::string two = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_EQ(message(two, eight), "(no error)");
  EXPECT_EQ(message(two + "    ", eight), "(no error)");  // space padding, as writers pad
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NE(message(overlap, eight).find("overlap the tensor before it"), std::string::npos);
  const std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  EXPECT_NE(message(gap, twelve).find("leave bytes 4..8 unused"), std::string::npos);
  const std::string late = R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NE(message(late, eight).find("leave bytes 0..4 unused"), std::string::npos);
  EXPECT_NE(message(two, twelve).find("4 bytes after the last tensor's data"), std::string::npos);
  EXPECT_NE(message(two + std::string(8, '\0'), eight).find("NUL byte"), std::string::npos);
  const std::string twice = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NE(message(twice, eight).find("names 'a' twice"), std::string::npos);
  EXPECT_NE(message(" " + two, eight).find("not a JSON object"), std::string::npos);
  // A tensor of no elements takes no bytes, wherever it sits.
  const std::string empty = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_EQ(message(empty, eight), "(no error)");
  fs::remove_all(dir);
}

TEST(Safetensors, ScanChecksumsEveryByteAndFindsNonFiniteValues) {
  const fs::path dir = temp_dir();
  const std::uint16_t bf_nan = 0x7FC0, f16_inf = 0xFC00, one = 0x3C00;
  auto write = [&](std::uint16_t h, float f) {
    std::string data(reinterpret_cast<const char*>(&h), 2);
    data.append(2, '\0');  // a second F16 element
    data.append(reinterpret_cast<const char*>(&f), 4);
    write_raw(dir / "s.safetensors",
              R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
              R"("f":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              data);
  };
  auto scan = [&](const std::set<std::string>& checked) {
    ByteHash h;
    SafetensorsFile(dir / "s.safetensors").scan(h, checked);
    return h.value();
  };
  write(one, 2.0f);
  const std::uint64_t base = scan({"h", "f"});
  write(one, 2.5f);
  EXPECT_NE(scan({"h", "f"}), base);  // any byte changes the checksum
  write(f16_inf, 1.0f);
  try {
    scan({"h", "f"});
    ADD_FAILURE() << "an F16 infinity passed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'h' holds a non-finite value (-inf) at element 0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(scan({"f"}));  // a tensor the engine does not read is not checked
  write(one, std::nanf(""));
  EXPECT_THROW(scan({"f"}), InputError);
  write(bf_nan, 1.0f);  // 0x7FC0 is an F16 NaN as well
  EXPECT_THROW(scan({"h"}), InputError);
  fs::remove_all(dir);
}

TEST(Safetensors, SetRefusesAmbiguousAndNonRegularWeightFiles) {
  const fs::path dir = temp_dir();
  const float one = 1.0f;
  {
    SafetensorsWriter w(dir / "model.safetensors", {{"a", {1}}}, {{"format", "pt"}});
    w.write("a", &one, 1);
    w.finish();
  }
  fs::copy_file(dir / "model.safetensors", dir / "s1.safetensors");
  std::ofstream(dir / "model.safetensors.index.json")
      << R"({"weight_map": {"a": "s1.safetensors"}})";
  auto refusal = [&] {
    try {
      SafetensorsSet set(dir);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(refusal().find("ambiguous"), std::string::npos);
  fs::remove(dir / "model.safetensors");
  EXPECT_EQ(refusal(), "(no error)");
  fs::remove(dir / "s1.safetensors");
  EXPECT_NE(refusal().find("s1.safetensors: does not exist"), std::string::npos) << refusal();
  fs::create_directory(dir / "s1.safetensors");
  EXPECT_NE(refusal().find("s1.safetensors: is a directory"), std::string::npos) << refusal();
  fs::remove(dir / "s1.safetensors");
  ASSERT_EQ(::mkfifo((dir / "s1.safetensors").c_str(), 0600), 0);
  EXPECT_NE(refusal().find("s1.safetensors: is a FIFO"), std::string::npos) << refusal();
  fs::remove(dir / "s1.safetensors");
  fs::create_symlink("s1.safetensors", dir / "s1.safetensors");
  EXPECT_NE(refusal().find("s1.safetensors: is a symbolic-link loop"), std::string::npos)
      << refusal();
  fs::remove(dir / "model.safetensors.index.json");
  fs::create_directory(dir / "model.safetensors.index.json");
  EXPECT_NE(refusal().find("model.safetensors.index.json: is a directory"), std::string::npos)
      << refusal();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace saturn::hf
