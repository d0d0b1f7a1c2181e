// titan encode: token ids of each stdin record (a line, or a JSON-lines document's text field),
// one output line per record with the ids separated by spaces. Records are encoded in batches
// spread over --threads threads; output order is input order.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "core/threading.h"
#include "data/jsonl.h"
#include "data/tokenizer.h"

namespace {

void append_ids(std::string& out, const std::vector<uint32_t>& ids) {
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out.push_back(' ');
    uint32_t v = ids[i];
    int n = 0;
    do {
      buf[n++] = char('0' + v % 10);
      v /= 10;
    } while (v);
    while (n) out.push_back(buf[--n]);
  }
  out.push_back('\n');
}

int cmd_encode(const std::vector<std::string>& argv) {
  titan::cli::Args args(argv, {"jsonl", "skip-bad-lines"});
  args.check_known({"tokenizer", "jsonl", "field", "threads", "skip-bad-lines"});
  TITAN_CHECK(args.positional().empty(), "encode reads stdin; unexpected argument '", args.positional()[0], "'");
  std::string dir = args.get("tokenizer", "");
  if (dir.empty()) dir = titan::data::Tokenizer::default_dir();
  auto tok = titan::data::Tokenizer::load(dir);
  bool jsonl = args.has("jsonl");
  bool skip_bad = args.has("skip-bad-lines");
  std::string field = args.get("field", "text");
  int threads = int(args.get_int("threads", 0, 0, titan::max_num_threads()));  // 0: all
  if (threads == 0) threads = titan::num_threads();

  constexpr size_t kBatchRecords = 4096, kBatchBytes = 8 << 20;
  std::vector<std::string> records;
  std::vector<uint64_t> line_no;
  uint64_t lines = 0, skipped = 0;
  std::string out, line;
  std::ios::sync_with_stdio(false);

  auto flush = [&] {
    size_t n = records.size();
    std::vector<std::vector<uint32_t>> ids(n);
    std::vector<std::string> why(n);
    std::vector<char> ok(n, 1);
    std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 8) num_threads(threads)
    for (int64_t i = 0; i < int64_t(n); ++i) {
      try {
        std::string text;
        const std::string* src = &records[size_t(i)];
        if (jsonl) {
          if (!titan::data::parse_jsonl_line(records[size_t(i)], field, &text, &why[size_t(i)])) {
            ok[size_t(i)] = 0;
            continue;
          }
          src = &text;
        }
        tok.encode_append(*src, ids[size_t(i)]);
      } catch (...) {
#pragma omp critical(titan_encode_cli)
        if (!err) err = std::current_exception();
      }
    }
    if (err) std::rethrow_exception(err);
    out.clear();
    for (size_t i = 0; i < n; ++i) {
      if (!ok[i]) {
        if (!skip_bad) {  // the records before the bad one are still printed
          std::fwrite(out.data(), 1, out.size(), stdout);
          std::fflush(stdout);
          titan::fail("<stdin>:", line_no[i], ": ", why[i], " (pass --skip-bad-lines to skip such lines)");
        }
        ++skipped;
        continue;
      }
      append_ids(out, ids[i]);
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    records.clear();
    line_no.clear();
  };

  size_t batch_bytes = 0;
  while (std::getline(std::cin, line)) {
    ++lines;
    if (jsonl && line.find_first_not_of(" \t\r") == std::string::npos) continue;
    batch_bytes += line.size();
    records.push_back(std::move(line));
    line_no.push_back(lines);
    if (records.size() >= kBatchRecords || batch_bytes >= kBatchBytes) {
      flush();
      batch_bytes = 0;
    }
  }
  TITAN_CHECK(!std::cin.bad(), "<stdin>: read error");
  flush();
  std::fflush(stdout);
  if (skipped) std::fprintf(stderr, "titan encode: skipped %llu bad lines\n", static_cast<unsigned long long>(skipped));
  return 0;
}

}  // namespace

TITAN_COMMAND("encode", "token ids of stdin lines or JSON-lines texts (--tokenizer DIR [--jsonl])", cmd_encode);
