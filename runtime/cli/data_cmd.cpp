// `saturn data prepare`: turns text into the token files a workload's `data:` entry names.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cli/commands.hpp"
#include "runtime/data/prepare.hpp"

namespace saturn::cli {

void add_data_command(CLI::App& root, Action* action) {
  CLI::App* data = root.add_subcommand("data", "Prepare training data (token files)");
  data->require_subcommand(1);

  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "Tokenize text files into llm.c token files for training.\n"
      "Each byte is one token (vocabulary 256, so models need vocab_size >= 256). The inputs are\n"
      "concatenated in the order given; the last --val-fraction of the tokens becomes DIR/val.bin\n"
      "and the rest DIR/train.bin (llm.c format: 256 int32 header, then uint16 tokens). Files\n"
      "are written under a temporary name and renamed, so a failed run leaves no partial file.\n"
      "Example: saturn data prepare --input /usr/share/common-licenses/* --output examples/data");
  // Shared with the callback, which runs after parsing.
  auto options = std::make_shared<data::PrepareOptions>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto output = std::make_shared<std::string>();
  prepare->add_option("--input,-i", *inputs, "Text files to tokenize (one or more)")->required();
  prepare->add_option("--output,-o", *output, "Directory for train.bin and val.bin (created)")
      ->required();
  prepare
      ->add_option("--val-fraction", options->val_fraction,
                   "Fraction of the tokens, taken from the end, for validation (0 < F < 1)")
      ->capture_default_str();
  prepare->callback([action, options, inputs, output] {
    *action = [options, inputs, output] {
      options->inputs.assign(inputs->begin(), inputs->end());
      options->output_dir = *output;
      const data::PrepareResult r = data::prepare_byte_dataset(*options);
      fmt::print("wrote {} ({} tokens) and {} ({} tokens), vocabulary {} (bytes)\n",
                 r.train_path.string(), r.train_tokens, r.val_path.string(), r.val_tokens,
                 data::kByteVocabSize);
      return 0;
    };
  });
}

}  // namespace saturn::cli
