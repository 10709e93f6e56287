// `saturn data prepare`: turns text into the token files a workload's `data:` entry names.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "runtime/data/prepare.hpp"

namespace saturn::cli {

void add_data_command(CLI::App& root, Action* action) {
  CLI::App* data = root.add_subcommand("data", "Prepare training data (token files)");
  data->require_subcommand(1);

  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "Tokenize text files into token files for training.\n"
      "By default each byte is one token (vocabulary 256, so models need vocab_size >= 256).\n"
      "With --tokenizer, a Hugging Face tokenizer.json (GPT-2's BPE, LLaMA's, ...) encodes each\n"
      "input (UTF-8 text) with the `tokenizers` library, run by a Python that has it\n"
      "(scripts/install-deps.sh --tests makes one; see --python): the ids of an encode of the\n"
      "whole input, computed in windows so that memory stays bounded (docs/workload.md).\n"
      "Training never needs Python.\n"
      "The inputs are concatenated in the order given; the last --val-fraction of the tokens\n"
      "becomes the val split and the rest the train split: DIR/train.bin and DIR/val.bin (llm.c\n"
      "format: 256 int32 header, then uint16 tokens), or DIR/train.h5 and DIR/val.h5 (HDF5\n"
      "/tokens, uint32) when the vocabulary exceeds 65536. Files are written under a temporary\n"
      "name and renamed, so a failed run leaves no partial file (and no DIR it created); an\n"
      "output that exists and is not a regular file (a FIFO, a link) is refused.\n"
      "With --format jsonl (and --tokenizer), each input line is an instruction record,\n"
      "{\"prompt\", \"completion\"} or {\"messages\": [{\"role\", \"content\"}, ...]}; chat\n"
      "records are rendered with the tokenizer's chat template (tokenizer_config.json, as\n"
      "transformers renders it; jinja2 needed), an eos ends each record, and a loss mask beside\n"
      "each token file (DIR/train.mask, DIR/val.mask: one byte per token) marks the answers'\n"
      "tokens, the only ones trained on. The split is by record. A malformed record is exit 2\n"
      "naming its file and line, and nothing is written.\n"
      "Examples:\n"
      "  saturn data prepare --input /usr/share/common-licenses/* --output examples/data\n"
      "  saturn data prepare --tokenizer /models/gpt2 --input corpus.txt --output data/gpt2\n"
      "  saturn data prepare --format jsonl --tokenizer /models/llama --input chats.jsonl \\\n"
      "      --output data/chats");
  // Shared with the callback, which runs after parsing.
  auto options = std::make_shared<data::PrepareOptions>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto output = std::make_shared<std::string>();
  auto tokenizer = std::make_shared<std::string>();
  auto python = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("text");
  prepare->add_option("--input,-i", *inputs, "Text files to tokenize (one or more)")->required();
  prepare->add_option("--output,-o", *output, "Directory for the train and val files (created)")
      ->required();
  prepare
      ->add_option("--val-fraction", options->val_fraction,
                   "Fraction of the tokens, taken from the end, for validation (0 < F < 1)")
      ->capture_default_str();
  prepare->add_option("--tokenizer,-t", *tokenizer,
                      "A Hugging Face tokenizer.json, or a model directory holding one (default: "
                      "the byte tokenizer)");
  prepare->add_option(
      "--python", *python,
      "The Python that runs the `tokenizers` library for --tokenizer (default: $SATURN_PYTHON, "
      "else ~/.cache/saturn/test-venv/bin/python if it exists, else python3)");
  prepare
      ->add_option("--format", *format,
                   "text: the inputs are text; jsonl: instruction records (needs --tokenizer)")
      ->check(CLI::IsMember({"text", "jsonl"}))
      ->capture_default_str();
  prepare->callback([action, options, inputs, output, tokenizer, python, format] {
    *action = [options, inputs, output, tokenizer, python, format] {
      options->inputs.assign(inputs->begin(), inputs->end());
      options->output_dir = *output;
      if (tokenizer->empty() && !python->empty())
        throw InputError("--python is used only with --tokenizer");
      const bool records = *format == "jsonl";
      const data::PrepareResult r =
          records              ? data::prepare_instruction_dataset(*options, *tokenizer, *python)
          : tokenizer->empty() ? data::prepare_byte_dataset(*options)
                               : data::prepare_tokenized_dataset(*options, *tokenizer, *python);
      fmt::print("wrote {} ({} tokens) and {} ({} tokens), vocabulary {} ({})\n",
                 r.train_path.string(), r.train_tokens, r.val_path.string(), r.val_tokens,
                 r.vocab_size, r.tokenizer);
      if (records)
        fmt::print(
            "records: {} train, {} val (boundaries {} and {}); loss masks {} and {}: {} of {} "
            "tokens trained on\n",
            r.train_records, r.val_records, r.train_record_starts.string(),
            r.val_record_starts.string(), r.train_mask.string(), r.val_mask.string(),
            r.trained_tokens, r.train_tokens + r.val_tokens);
      if (!tokenizer->empty())
        fmt::print("models trained on this data need vocab_size >= {}\n", r.vocab_size);
      return 0;
    };
  });
}

}  // namespace saturn::cli
