#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "runtime/data/prepare.hpp"
#include "runtime/data/token_file.hpp"
#include "tests/data/test_util.hpp"

namespace saturn::data {
namespace {

namespace fs = std::filesystem;
using saturn::testing::error_of;
using saturn::testing::TempDir;
using saturn::testing::write_file;

std::string as_text(const fs::path& p) {
  std::string s;
  for (std::uint32_t t : read_tokens(p, kByteVocabSize)) s += static_cast<char>(t);
  return s;
}

TEST(Prepare, ConcatenatesAndSplitsTheLastFraction) {
  TempDir dir;
  write_file(dir / "a.txt", "hello ");
  write_file(dir / "b.txt", "world!!!!");  // 15 bytes in all
  const PrepareResult r = prepare_byte_dataset({{dir / "a.txt", dir / "b.txt"}, dir / "out", 0.25});
  EXPECT_EQ(r.train_path, dir / "out" / "train.bin");
  EXPECT_EQ(r.val_path, dir / "out" / "val.bin");
  EXPECT_EQ(r.val_tokens, 4u);  // round(15 * 0.25)
  EXPECT_EQ(r.train_tokens, 11u);
  EXPECT_EQ(as_text(r.train_path), "hello world");
  EXPECT_EQ(as_text(r.val_path), "!!!!");
  EXPECT_EQ(detect_token_format(r.train_path), TokenFormat::kLlmc);
}

TEST(Prepare, DefaultFractionAndAllByteValues) {
  TempDir dir;
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += static_cast<char>(i % 256);
  write_file(dir / "bin.dat", bytes);
  PrepareOptions o;
  o.inputs = {dir / "bin.dat"};
  o.output_dir = dir / "out";
  const PrepareResult r = prepare_byte_dataset(o);
  EXPECT_EQ(r.train_tokens, 900u);
  EXPECT_EQ(r.val_tokens, 100u);
  const auto train = read_tokens(r.train_path, kByteVocabSize);
  const auto val = read_tokens(r.val_path, kByteVocabSize);
  for (int i = 0; i < 900; ++i) ASSERT_EQ(train[i], static_cast<std::uint32_t>(i % 256));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(val[i], static_cast<std::uint32_t>((900 + i) % 256));
}

TEST(Prepare, BadInputWritesNothing) {
  TempDir dir;
  write_file(dir / "a.txt", "some text here");
  const fs::path out = dir / "out";
  std::string msg = error_of<InputError>([&] {
    prepare_byte_dataset({{dir / "a.txt", dir / "missing.txt"}, out, 0.1});
  });
  EXPECT_CONTAINS(msg, (dir / "missing.txt").string());
  EXPECT_CONTAINS(msg, "does not exist");
  for (double f : {0.0, 1.0, -0.5, 1.5}) {
    msg = error_of<InputError>([&] { prepare_byte_dataset({{dir / "a.txt"}, out, f}); });
    EXPECT_CONTAINS(msg, "--val-fraction");
    EXPECT_CONTAINS(msg, "0 < F < 1");
  }
  write_file(dir / "empty.txt", "");
  EXPECT_CONTAINS(error_of<InputError>([&] {
                    prepare_byte_dataset({{dir / "empty.txt"}, out});
                  }),
                  "empty");
  write_file(dir / "tiny.txt", "abc");  // 3 * 0.1 rounds to 0 val tokens
  EXPECT_CONTAINS(error_of<InputError>([&] {
                    prepare_byte_dataset({{dir / "tiny.txt"}, out});
                  }),
                  "leaves the val split empty");
  EXPECT_FALSE(fs::exists(out));
  write_file(dir / "file", "x");
  EXPECT_CONTAINS(error_of<InputError>([&] {
                    prepare_byte_dataset({{dir / "a.txt"}, dir / "file"});
                  }),
                  "exists and is not a directory");
}

// The CLI contract: `saturn data prepare --input FILE... --output DIR [--val-fraction F]`.
TEST(DataCommand, PrepareFromTheCommandLine) {
  TempDir dir;
  write_file(dir / "a.txt", "abcdefghij");
  write_file(dir / "b.txt", "klmnopqrst");
  CLI::App app{"saturn"};
  app.require_subcommand(1);
  cli::Action action;
  cli::add_data_command(app, &action);
  const std::string a = (dir / "a.txt").string(), b = (dir / "b.txt").string(),
                    out = (dir / "out").string();
  std::vector<const char*> argv = {"saturn",  "data",     "prepare",   "--input",        a.c_str(),
                                   b.c_str(), "--output", out.c_str(), "--val-fraction", "0.2"};
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  ASSERT_TRUE(action);
  EXPECT_EQ(action(), 0);
  EXPECT_EQ(as_text(dir / "out" / "train.bin"), "abcdefghijklmnop");
  EXPECT_EQ(as_text(dir / "out" / "val.bin"), "qrst");

  const std::string help = app.get_subcommand("data")->get_subcommand("prepare")->help();
  EXPECT_CONTAINS(help, "--input");
  EXPECT_CONTAINS(help, "--output");
  EXPECT_CONTAINS(help, "--val-fraction");
  EXPECT_CONTAINS(help, "vocabulary 256");
}

TEST(DataCommand, MissingRequiredOptionIsAUsageError) {
  CLI::App app{"saturn"};
  cli::Action action;
  cli::add_data_command(app, &action);
  std::vector<const char*> argv = {"saturn", "data", "prepare", "--input", "x.txt"};
  EXPECT_THROW(app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data())),
               CLI::ParseError);
}

}  // namespace
}  // namespace saturn::data
