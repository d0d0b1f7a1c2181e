// titan tokenize: text sources (JSON lines or plain text) into one token file (.bin) for training,
// with a progress bar (rate, ETA) on stderr for long jobs.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "core/threading.h"
#include "data/dataset.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace {

int cmd_tokenize(const std::vector<std::string>& argv) {
  titan::cli::Args args(argv, {"skip-bad-lines", "quiet"});
  args.check_known({"tokenizer", "input", "output", "threads", "field", "skip-bad-lines", "quiet"});
  // --input takes one value; further input files follow it as plain arguments.
  std::vector<std::string> inputs;
  if (args.has("input")) inputs.push_back(args.get("input"));
  for (auto& p : args.positional()) inputs.push_back(p);
  TITAN_CHECK(!inputs.empty(), "tokenize needs --input FILE [FILE...]");
  std::string output = args.require("output");
  std::string dir = args.get("tokenizer", "");
  if (dir.empty()) dir = titan::data::Tokenizer::default_dir();
  auto tok = titan::data::Tokenizer::load(dir);

  titan::data::DatasetSpec spec;
  spec.text_field = args.get("field", "text");
  spec.skip_bad_lines = args.has("skip-bad-lines");
  spec.bad_line_hint = "pass --skip-bad-lines to skip such lines";
  spec.threads = int(args.get_int("threads", 0, 0, titan::max_num_threads()));
  spec.progress = !args.has("quiet");
  std::vector<std::string> files;
  for (auto& in : inputs) {
    auto r = titan::data::resolve_dataset_files(in);
    files.insert(files.end(), r.begin(), r.end());
  }
  // The output must not be one of the inputs (the dataset would be replaced by its token ids).
  for (const auto& f : files) {
    std::error_code ec;
    TITAN_CHECK(!std::filesystem::equivalent(f, output, ec), output, ": is also an input (", f,
                "); writing it would replace the dataset with token ids; choose another --output");
  }
  titan::data::TokenFileWriter w(output, tok.vocab_size(), tok.eot_id(), tok.fingerprint());
  auto st = titan::data::tokenize_files(files, tok, spec, [&](const std::vector<uint32_t>& ids) { w.add_document(ids); },
                                        "tokenize");
  w.close();
  if (st.skipped)
    std::fprintf(stderr, "titan tokenize: skipped %llu bad lines\n", static_cast<unsigned long long>(st.skipped));
  std::fprintf(stderr, "titan tokenize: wrote %s (%llu documents, %llu tokens incl. separators)\n", output.c_str(),
               static_cast<unsigned long long>(w.document_count()), static_cast<unsigned long long>(w.token_count()));
  return 0;
}

}  // namespace

TITAN_COMMAND("tokenize", "text files (JSON lines or plain) -> token .bin (--input FILES --output F.bin)", cmd_tokenize);
