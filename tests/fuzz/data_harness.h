// Bodies of the data fuzz targets, shared by the libFuzzer entry points (fuzz_*.cpp) and by the
// regression test that replays saved crash inputs (tests/unit/data/test_fuzz_regression.cpp).
// A titan::Error is an accepted outcome (a clear error); any other exception, crash or failed
// property aborts.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

#include "core/error.h"
#include "data/jsonl.h"
#include "data/parquet.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "io/token_lines.h"

namespace titan::fuzz {

inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property failed: %s\n", what);
    std::abort();
  }
}

inline const data::Tokenizer& bundled_tokenizer() {
  static const data::Tokenizer tok = data::Tokenizer::load(std::string(TITAN_SOURCE_DIR) + "/assets/qwen3-tokenizer");
  return tok;
}

// encode/decode round trip on arbitrary bytes with the Qwen3 tokenizer.
inline void tokenizer_round_trip(std::string_view input) {
  const auto& tok = bundled_tokenizer();
  auto ids = tok.encode(input);
  for (uint32_t id : ids) check(id < tok.vocab_size(), "id below vocab size");
  std::string text = tok.decode(ids);
  check(data::is_valid_utf8(text), "decode gives valid UTF-8");
  // Without '<' no added token can occur, so the text is normalized as one segment and decode
  // gives back exactly what the tokenizer saw: invalid UTF-8 replaced, then NFC. (Around added
  // tokens segments are normalized apart, and NFC can create or break a token's spelling, as
  // '>' + U+0338 -> U+226F or "thin" + U+212A -> "think" do, in `tokenizers` too.)
  if (input.find('<') == std::string_view::npos) {
    check(text == data::nfc(data::utf8_replace_invalid(input)), "decode(encode(x)) == NFC(x)");
    check(tok.encode(text) == ids, "encode(decode(encode(x))) == encode(x)");
  }
}

// Loading arbitrary tokenizer.json bytes; when they load, encoding and decoding must work.
inline void tokenizer_json(std::string_view input) {
  try {
    auto tok = data::Tokenizer::from_json(input, "fuzz.json");
    for (std::string_view s : {std::string_view("Hello world, it's 2024! <|endoftext|>"), input.substr(0, 256)}) {
      auto ids = tok.encode(s);
      (void)tok.decode(ids);
    }
  } catch (const Error&) {
  }
}

// JSON-lines reading of arbitrary bytes, failing and skipping modes.
inline void jsonl(std::string_view input) {
  for (bool skip : {false, true}) {
    std::istringstream in{std::string(input)};
    data::JsonlOptions o;
    o.skip_bad_lines = skip;
    data::JsonlStats st;
    uint64_t docs = 0;
    try {
      data::read_jsonl(in, "fuzz.jsonl", o, [&](std::string&& t) { ++docs, (void)t; }, &st);
      check(docs == st.documents, "document count");
    } catch (const Error&) {
      check(!skip, "skip mode never fails on content");
    }
  }
}

// Token-id lines (`titan score --tokens`) from arbitrary bytes: either a clear error or a
// rectangular i64 batch of non-negative ids whose labels are the ids shifted by one.
inline void token_lines(std::string_view input) {
  try {
    Tensor ids = parse_token_lines(std::string(input), "fuzz.txt");
    check(ids.ndim() == 2 && ids.numel() > 0, "a [B, S] batch");
    const int64_t* p = ids.data<int64_t>();
    for (int64_t i = 0; i < ids.numel(); ++i) check(p[i] >= 0, "ids are non-negative");
    Tensor labels = next_token_labels(ids);
    const int64_t S = ids.dim(1);
    const int64_t* l = labels.data<int64_t>();
    for (int64_t b = 0; b < ids.dim(0); ++b)
      for (int64_t t = 0; t < S; ++t)
        check(l[b * S + t] == (t + 1 < S ? p[b * S + t + 1] : -100), "labels are the next ids");
  } catch (const Error&) {
  }
}

// Parquet files from arbitrary bytes: every top-level column read as text and the "messages"
// column as chat, every row group, every row; a titan::Error or rows, never a crash.
inline void parquet(std::string_view input) {
  data::parquet::set_max_chunk_bytes(uint64_t(64) << 20);
  try {
    auto f = std::make_shared<data::parquet::File>(data::parquet::memory_source(std::string(input), "fuzz.parquet"));
    std::vector<std::pair<std::string, bool>> columns = {{"messages", true}};
    for (const auto& l : f->leaves()) columns.emplace_back(l.path[0], false);
    for (const auto& [name, chat] : columns) {
      try {
        data::parquet::ColumnRows rows(f, name, chat);
        for (size_t g = 0; g < rows.row_groups(); ++g) {
          rows.load(g);
          std::string t, why;
          std::vector<data::ChatMessage> m;
          for (int64_t i = 0; i < rows.rows_in(g); ++i) {
            const bool ok = chat ? rows.messages(i, &m, &why) : rows.text(i, &t, &why);
            check(ok || !why.empty(), "a bad row says why");
            if (ok && !chat) check(data::is_valid_utf8(t), "text rows are valid UTF-8");
          }
        }
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
}

}  // namespace titan::fuzz
