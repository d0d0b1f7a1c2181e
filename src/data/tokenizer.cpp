#include "data/tokenizer.h"

#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/added_tokens.h"
#include "data/bpe.h"
#include "data/byte_level.h"
#include "data/regex_split.h"
#include "data/tokenizer_json.h"
#include "data/utf8.h"
#include "util/strings.h"

namespace titan::data {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The GPT-2 pattern that a ByteLevel pre-tokenizer with use_regex=true applies.
static const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// The Qwen2/Qwen3 pattern (as in their tokenizer.json).
static const char* kQwenPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct Tokenizer::Impl {
  std::string origin;
  uint64_t fingerprint = 0;
  bool nfc = false;
  bool ignore_merges = false;
  std::vector<std::unique_ptr<RegexSplitter>> splits;  // applied in order, each to every piece
  BpeModel bpe;
  AddedTokenMatcher raw_added, normalized_added;
  std::vector<AddedToken> added;
  std::vector<int32_t> added_index;      // id -> index into `added`, or -1
  std::vector<std::string> added_bytes;  // decoded bytes of each added token
  uint32_t vocab_size = 0;
  bool known_patterns = true;  // every split pattern is kGpt2Pattern or kQwenPattern

  void encode_pieces(size_t stage, std::string_view text, std::vector<uint32_t>& out) const {
    if (stage == splits.size()) {
      if (ignore_merges) {
        int64_t id = bpe.find(text);
        if (id >= 0) {
          out.push_back(uint32_t(id));
          return;
        }
      }
      bpe.encode_word(text, out);
      return;
    }
    splits[stage]->split(text, [&](std::string_view piece) { encode_pieces(stage + 1, piece, out); });
  }

  void encode_segment(std::string_view seg, std::vector<uint32_t>& out) const {
    std::string normed;
    if (nfc) {
      normed = data::nfc(seg);
      seg = normed;
    }
    normalized_added.split(seg, [&](std::string_view s, int64_t id) {
      if (id >= 0) {
        out.push_back(uint32_t(id));
      } else {
        encode_pieces(0, s, out);
      }
    });
  }
};

namespace {

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "?"; }

bool flag(const json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  return j[key].get<bool>();
}

void parse_normalizer(const json& j, Tokenizer::Impl& m) {
  if (j.is_null()) return;
  std::string t = type_of(j);
  if (t == "NFC") {
    m.nfc = true;
  } else if (t == "Sequence") {
    for (auto& n : j.at("normalizers")) parse_normalizer(n, m);
  } else {
    fail(m.origin, ": normalizer type '", t, "' is not supported (only NFC)");
  }
}

// Returns whether a ByteLevel step was seen.
bool parse_pre_tokenizer(const json& j, Tokenizer::Impl& m) {
  if (j.is_null()) return false;
  std::string t = type_of(j);
  if (t == "Sequence") {
    bool byte_level = false;
    for (auto& p : j.at("pretokenizers")) byte_level |= parse_pre_tokenizer(p, m);
    return byte_level;
  }
  if (t == "ByteLevel") {
    TITAN_CHECK(!flag(j, "add_prefix_space", false), m.origin, ": ByteLevel add_prefix_space=true is not supported");
    if (flag(j, "use_regex", true)) m.splits.push_back(std::make_unique<RegexSplitter>(kGpt2Pattern, m.origin));
    return true;
  }
  if (t == "Split") {
    std::string behavior = j.value("behavior", std::string("?"));
    TITAN_CHECK(behavior == "Isolated", m.origin, ": Split behavior '", behavior, "' is not supported (only Isolated)");
    TITAN_CHECK(!flag(j, "invert", false), m.origin, ": Split with invert=true is not supported");
    const json& pat = j.at("pattern");
    std::string regex;
    if (pat.contains("Regex")) {
      regex = pat["Regex"].get<std::string>();
    } else if (pat.contains("String")) {
      regex = "\\Q" + pat["String"].get<std::string>() + "\\E";
    } else {
      fail(m.origin, ": Split pattern needs a Regex or String");
    }
    if (regex != kQwenPattern && regex != kGpt2Pattern) m.known_patterns = false;
    m.splits.push_back(std::make_unique<RegexSplitter>(regex, m.origin));
    return false;
  }
  fail(m.origin, ": pre-tokenizer type '", t, "' is not supported (Split, ByteLevel, Sequence)");
}

void parse_model(const json& j, BpeTablesText& tables, Tokenizer::Impl& m) {
  TITAN_CHECK(type_of(j) == "BPE", m.origin, ": model type '", type_of(j), "' is not supported (only BPE)");
  TITAN_CHECK(!j.contains("dropout") || j["dropout"].is_null(), m.origin, ": BPE dropout is not supported");
  TITAN_CHECK(!flag(j, "byte_fallback", false), m.origin, ": BPE byte_fallback is not supported");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    TITAN_CHECK(!j.contains(k) || j[k].is_null() || j[k].get<std::string>().empty(), m.origin, ": BPE ", k,
                " is not supported");
  m.ignore_merges = flag(j, "ignore_merges", false);
  TITAN_CHECK(tables.has_vocab, m.origin, ": model.vocab is missing");
  TITAN_CHECK(tables.has_merges, m.origin, ": model.merges is missing");

  std::vector<std::pair<std::string, uint32_t>> v;
  v.reserve(tables.vocab.size());
  std::string bytes;
  for (auto& [tok, id] : tables.vocab) {
    TITAN_CHECK(id < 0xFFFFFFFFull, m.origin, ": vocab token '", tok, "' has id ", id, ", too large");
    TITAN_CHECK(byte_level_decode(tok, &bytes), m.origin, ": vocab token '", tok, "' is not a byte-level string");
    v.emplace_back(bytes, uint32_t(id));
  }
  tables.vocab = {};
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(tables.merges.size());
  std::string a, b;
  for (size_t r = 0; r < tables.merges.size(); ++r) {
    TITAN_CHECK(byte_level_decode(tables.merges[r].first, &a) && byte_level_decode(tables.merges[r].second, &b),
                m.origin, ": merge ", r, " has a token that is not a byte-level string");
    merges.emplace_back(a, b);
  }
  tables.merges = {};
  m.bpe.build(std::move(v), merges, m.origin);
}

void parse_added(const json& j, Tokenizer::Impl& m) {
  if (j.is_null()) return;
  TITAN_CHECK(j.is_array(), m.origin, ": added_tokens must be an array");
  const ByteLevelMap& bl = byte_level_map();
  (void)bl;
  for (const json& t : j) {
    AddedToken a;
    a.content = t.at("content").get<std::string>();
    a.id = t.at("id").get<uint32_t>();
    a.special = flag(t, "special", false);
    a.normalized = flag(t, "normalized", !a.special);
    for (const char* k : {"single_word", "lstrip", "rstrip"})
      TITAN_CHECK(!flag(t, k, false), m.origin, ": added token '", a.content, "' sets ", k,
                  ", which is not supported");
    TITAN_CHECK(is_valid_utf8(a.content), m.origin, ": added token ", a.id, " is not valid UTF-8");
    if (a.normalized) {
      m.normalized_added.add(m.nfc ? nfc(a.content) : a.content, a.id);
    } else {
      m.raw_added.add(a.content, a.id);
    }
    m.added.push_back(std::move(a));
  }
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view bytes, const std::string& origin) {
  auto m = std::make_shared<Impl>();
  m->origin = origin;
  m->fingerprint = fnv1a(bytes);
  BpeTablesText tables;
  json j = parse_tokenizer_json(bytes, origin, &tables);
  TITAN_CHECK(j.is_object(), origin, ": tokenizer.json must hold a JSON object");
  try {
    TITAN_CHECK(j.contains("model"), origin, ": no \"model\" section");
    parse_normalizer(j.value("normalizer", json()), *m);
    bool byte_level = parse_pre_tokenizer(j.value("pre_tokenizer", json()), *m);
    TITAN_CHECK(byte_level, origin, ": the pre-tokenizer has no ByteLevel step (only byte-level BPE is supported)");
    TITAN_CHECK(type_of(j.value("decoder", json())) == "ByteLevel", origin,
                ": decoder must be ByteLevel, found '", type_of(j.value("decoder", json())), "'");
    json post = j.value("post_processor", json());
    TITAN_CHECK(post.is_null() || type_of(post) == "ByteLevel", origin, ": post_processor type '", type_of(post),
                "' is not supported (it would add tokens)");
    parse_model(j["model"], tables, *m);
    parse_added(j.value("added_tokens", json()), *m);
  } catch (const json::exception& e) {
    fail(origin, ": unexpected tokenizer.json structure: ", e.what());
  }
  uint32_t vs = uint32_t(m->bpe.size());
  for (auto& a : m->added) {
    TITAN_CHECK(a.id < m->bpe.size() + 2 * m->added.size() + 1024, origin, ": added token id ", a.id,
                " is far beyond the vocabulary");
    vs = std::max(vs, a.id + 1);
  }
  m->vocab_size = vs;
  m->added_index.assign(vs, -1);
  m->added_bytes.resize(m->added.size());
  for (size_t k = 0; k < m->added.size(); ++k) {
    const AddedToken& a = m->added[k];
    m->added_index[a.id] = int32_t(k);
    // The ByteLevel decoder maps every character of a token back to its byte when all of them are
    // byte images, and otherwise keeps the token's own UTF-8 bytes.
    if (!byte_level_decode(a.content, &m->added_bytes[k])) m->added_bytes[k] = a.content;
  }
  Tokenizer t;
  t.impl_ = std::move(m);
  return t;
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) file = (fs::path(path) / "tokenizer.json").string();
  TITAN_CHECK(fs::exists(file, ec), file, ": tokenizer file not found");
  return from_json(read_regular_file(file), file);
}

std::string Tokenizer::default_dir() {
  if (const char* env = std::getenv("TITAN_TOKENIZER_DIR"); env && *env) return env;
  std::error_code ec;
  std::vector<fs::path> candidates;
#ifdef TITAN_SOURCE_DIR
  candidates.push_back(fs::path(TITAN_SOURCE_DIR) / "assets" / "qwen3-tokenizer");
#endif
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "assets" / "qwen3-tokenizer");
    candidates.push_back(exe.parent_path().parent_path() / "assets" / "qwen3-tokenizer");
    candidates.push_back(exe.parent_path().parent_path() / "share" / "titan" / "assets" / "qwen3-tokenizer");
  }
  for (auto& c : candidates)
    if (fs::exists(c / "tokenizer.json", ec)) return c.string();
  fail("the bundled tokenizer (assets/qwen3-tokenizer) was not found; pass --tokenizer DIR or set TITAN_TOKENIZER_DIR");
}

void Tokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  const Impl& m = *impl_;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_replace_invalid(text);
    text = repaired;
  }
  m.raw_added.split(text, [&](std::string_view seg, int64_t id) {
    if (id >= 0) {
      out.push_back(uint32_t(id));
    } else {
      m.encode_segment(seg, out);
    }
  });
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_append(text, ids);
  return ids;
}

std::vector<std::vector<uint32_t>> Tokenizer::encode_batch(const std::vector<std::string>& texts, int threads) const {
  std::vector<std::vector<uint32_t>> out(texts.size());
  if (threads <= 0) threads = omp_get_max_threads();
  int64_t n = int64_t(texts.size());
  // Errors inside the parallel region are carried out of it and rethrown on the calling thread.
  std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) {
    try {
      out[size_t(i)] = encode(texts[size_t(i)]);
    } catch (...) {
#pragma omp critical(titan_encode_batch_error)
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  return utf8_replace_invalid(decode_bytes(ids, skip_special_tokens));
}

bool Tokenizer::has_id(uint32_t id) const {
  const Impl& m = *impl_;
  return (id < m.added_index.size() && m.added_index[id] >= 0) || m.bpe.has_id(id);
}

std::string Tokenizer::decode_bytes(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::string bytes;
  for (uint32_t id : ids) {
    if (id < m.added_index.size() && m.added_index[id] >= 0) {
      size_t k = size_t(m.added_index[id]);
      if (skip_special_tokens && m.added[k].special) continue;
      bytes += m.added_bytes[k];
    } else {
      TITAN_CHECK(m.bpe.has_id(id), "decode: token id ", id, " is not in the vocabulary of ", m.origin);
      bytes += m.bpe.token_bytes(id);
    }
  }
  return bytes;
}

uint32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

int64_t Tokenizer::token_to_id(std::string_view token) const {
  for (auto& a : impl_->added)
    if (a.content == token) return a.id;
  std::string bytes;
  if (!byte_level_decode(token, &bytes)) return -1;
  return impl_->bpe.find(bytes);
}

uint32_t Tokenizer::eot_id() const {
  int64_t id = token_to_id("<|endoftext|>");
  TITAN_CHECK(id >= 0, impl_->origin, ": no <|endoftext|> token to separate documents");
  return uint32_t(id);
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
bool Tokenizer::splits_after_newline() const {
  if (!impl_->known_patterns) return false;
  for (auto& a : impl_->added)
    if (a.content.find('\n') != std::string::npos) return false;
  return true;
}

uint64_t Tokenizer::fingerprint() const { return impl_->fingerprint; }
const std::string& Tokenizer::origin() const { return impl_->origin; }

}  // namespace titan::data
