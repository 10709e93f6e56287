// Input files, output files and output directories (runtime/core/files, output_dir, atomic_file,
// byte_hash): what is refused, that a refusal never blocks or replaces anything, and that a
// staged directory replaces its target only whole.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/byte_hash.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/core/output_dir.hpp"

namespace saturn {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  const fs::path d =
      fs::temp_directory_path() / ("saturn-files-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(InputFile, ReadsRegularFilesAndLinksToThem) {
  const fs::path dir = temp_dir();
  write(dir / "a.json", "{\"x\": 1}");
  fs::create_symlink("a.json", dir / "link.json");
  EXPECT_EQ(read_input_file(dir / "a.json"), "{\"x\": 1}");
  EXPECT_EQ(read_input_file(dir / "link.json"), "{\"x\": 1}");
  EXPECT_EQ(InputFile(dir / "a.json").size(), 8u);
  EXPECT_NE(refusal([&] { read_input_file(dir / "a.json", 4); }).find("more than the 4"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(InputFile, RefusesWhatIsNotARegularFileWithoutBlocking) {
  const fs::path dir = temp_dir();
  fs::create_directory(dir / "d");
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  fs::create_symlink("loop", dir / "loop");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(refusal([&] { InputFile f(dir / "d"); }),
            (dir / "d").string() + ": is a directory, not a regular file");
  EXPECT_EQ(refusal([&] { InputFile f(dir / "fifo"); }),
            (dir / "fifo").string() + ": is a FIFO, not a regular file");
  EXPECT_EQ(refusal([&] { InputFile f("/dev/null"); }),
            "/dev/null: is a character device, not a regular file");
  EXPECT_EQ(refusal([&] { InputFile f(dir / "missing"); }),
            (dir / "missing").string() + ": does not exist");
  EXPECT_EQ(refusal([&] { InputFile f(dir / "loop"); }),
            (dir / "loop").string() + ": is a symbolic-link loop");
  EXPECT_NE(refusal([&] { require_regular_file(dir / "fifo"); }).find("is a FIFO"),
            std::string::npos);
  // A blocking open of the FIFO would never return; the refusals take no time.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  fs::remove_all(dir);
}

TEST(OutputFile, NeverReplacesWhatIsNotARegularFile) {
  const fs::path dir = temp_dir();
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  fs::create_symlink("/proc/self/fd/1", dir / "link");
  fs::create_directory(dir / "d");
  EXPECT_NO_THROW(check_output_file(dir / "new"));
  write(dir / "old", "x");
  EXPECT_NO_THROW(check_output_file(dir / "old"));
  EXPECT_NE(refusal([&] { check_output_file("/dev/null"); }).find("is a character device"),
            std::string::npos);
  EXPECT_NE(refusal([&] { write_file_atomic(dir / "fifo", "text"); }).find("is a FIFO"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              write_file_atomic(dir / "link", "text");
            }).find("is a symbolic link to /proc/self/fd/1"),
            std::string::npos);
  EXPECT_NE(refusal([&] { write_file_atomic(dir / "d", "text"); }).find("is a directory"),
            std::string::npos);
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(dir / "fifo")));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir / "link")));
  EXPECT_TRUE(fs::is_directory(dir / "d"));
  write_file_atomic(dir / "old", "new text");
  EXPECT_EQ(read_input_file(dir / "old"), "new text");
  // No temporary file is left by the refusals.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 4);
  fs::remove_all(dir);
}

// A staged directory holding one file, committed or not.
void stage(const fs::path& target, const OutputDirOptions& options, const std::string& text,
           bool commit = true) {
  StagedOutputDir out(target, options);
  write(out.path() / "weights", text);
  if (commit) out.commit();
}

int count_entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(StagedOutputDir, ReplacesOnlyWholeAndOnlyWhatItMay) {
  const fs::path dir = temp_dir();
  const fs::path target = dir / "out";
  OutputDirOptions ours;
  ours.is_ours = [](const fs::path& d) { return fs::exists(d / "weights"); };
  stage(target, ours, "one");  // new
  EXPECT_EQ(read_input_file(target / "weights"), "one");
  stage(target, ours, "two");  // an earlier output of ours
  EXPECT_EQ(read_input_file(target / "weights"), "two");
  stage(target, ours, "three", false);  // a failure before commit: the target is as it was
  EXPECT_EQ(read_input_file(target / "weights"), "two");
  EXPECT_EQ(count_entries(dir), 1) << "a staging directory was left behind";

  const fs::path foreign = dir / "foreign";
  fs::create_directory(foreign);
  write(foreign / "README.md", "mine");
  EXPECT_NE(refusal([&] { stage(foreign, ours, "x"); }).find("not an earlier export"),
            std::string::npos);
  EXPECT_EQ(read_input_file(foreign / "README.md"), "mine");
  OutputDirOptions force = ours;
  force.force = true;
  stage(foreign, force, "forced");
  EXPECT_EQ(read_input_file(foreign / "weights"), "forced");
  EXPECT_FALSE(fs::exists(foreign / "README.md"));

  fs::create_directory(dir / "empty");
  stage(dir / "empty", {}, "into an empty directory");
  EXPECT_EQ(read_input_file(dir / "empty" / "weights"), "into an empty directory");

  OutputDirOptions guarded = force;
  guarded.protected_dirs.emplace_back(dir / "origin", "--from origin");
  fs::create_directory(dir / "origin");
  EXPECT_NE(refusal([&] { stage(dir / "origin", guarded, "x"); }).find("is --from origin"),
            std::string::npos);
  EXPECT_NE(
      refusal([&] { stage(dir / "origin" / "sub", guarded, "x"); }).find("is inside --from origin"),
      std::string::npos);
  EXPECT_TRUE(fs::is_empty(dir / "origin"));

  write(dir / "file", "f");
  EXPECT_NE(
      refusal([&] { stage(dir / "file", force, "x"); }).find("is a regular file, not a directory"),
      std::string::npos);
  fs::create_directory_symlink("out", dir / "link");
  EXPECT_NE(refusal([&] { stage(dir / "link", force, "x"); }).find("is a symbolic link"),
            std::string::npos);
  EXPECT_EQ(read_input_file(target / "weights"), "two");
  fs::remove_all(dir);
}

TEST(ByteHash, EveryByteCountsAndChunkingDoesNot) {
  std::string text(1000, 'a');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7 + 3);
  ByteHash whole;
  whole.update(text.data(), text.size());
  for (std::size_t cut : {1u, 3u, 8u, 13u, 999u}) {
    ByteHash parts;
    parts.update(text.data(), cut);
    parts.update(text.data() + cut, text.size() - cut);
    EXPECT_EQ(parts.value(), whole.value()) << cut;
  }
  for (std::size_t at : {0u, 7u, 8u, 500u, 999u}) {
    std::string changed = text;
    changed[at] ^= 1;
    ByteHash h;
    h.update(changed.data(), changed.size());
    EXPECT_NE(h.value(), whole.value()) << at;
  }
  ByteHash longer;
  longer.update(text.data(), text.size());
  longer.update("\0", 1);  // a trailing zero byte counts
  EXPECT_NE(longer.value(), whole.value());
  std::uint64_t back = 0;
  ASSERT_TRUE(parse_hash(format_hash(whole.value()), back));
  EXPECT_EQ(back, whole.value());
  EXPECT_FALSE(parse_hash("0x", back));
  EXPECT_FALSE(parse_hash("12", back));
  EXPECT_FALSE(parse_hash("0x12g", back));
}

}  // namespace
}  // namespace saturn
