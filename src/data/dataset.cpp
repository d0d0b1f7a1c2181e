#include "data/dataset.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/threading.h"
#include "data/hf_folder.h"
#include "data/progress.h"
#include "data/token_cache.h"
#include "util/strings.h"

namespace titan::data {

namespace fs = std::filesystem;

void log_to_stderr(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

const std::vector<DatasetInfo>& dataset_registry() {
  static const std::vector<DatasetInfo> r = {
      {"c4_test", {"c4_sample/c4_en_train_first1000.jsonl"},
       "the first 1000 documents of C4 en train (2.2 MB of text, ~0.5M tokens); the default training set"},
      {"c4_demo", {"c4_sample/c4_demo_300.jsonl"}, "300 other C4 en documents (0.74 MB of text), for evaluation"},
  };
  return r;
}

std::string data_root() {
  if (const char* env = std::getenv("TITAN_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  std::vector<fs::path> candidates;
#ifdef TITAN_SOURCE_DIR
  candidates.push_back(fs::path(TITAN_SOURCE_DIR) / "data");
#endif
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / "data");
    candidates.push_back(exe.parent_path().parent_path() / "data");
  }
  for (auto& c : candidates)
    if (fs::exists(c / "c4_sample", ec)) return c.string();
  fail("the bundled datasets (data/c4_sample) were not found; set TITAN_DATA_DIR or pass dataset paths");
}

std::string default_cache_dir() {
  if (const char* env = std::getenv("TITAN_CACHE_DIR"); env && *env) return env;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "titan").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "titan").string();
  return (fs::temp_directory_path() / "titan-cache").string();
}

std::vector<std::string> resolve_dataset_files(const std::string& name_or_path) {
  TITAN_CHECK(!trim(name_or_path).empty(), "dataset: empty name or path");
  for (auto& d : dataset_registry()) {
    if (d.name == name_or_path) {
      std::vector<std::string> files;
      std::string root = data_root();
      for (auto& f : d.files) files.push_back((fs::path(root) / f).string());
      for (auto& f : files) TITAN_CHECK(fs::exists(f), "dataset ", d.name, ": bundled file ", f, " is missing");
      return files;
    }
  }
  std::vector<std::string> files;
  for (const std::string& raw : split(name_or_path, ',')) {
    std::string p = trim(raw);
    if (p.empty()) continue;
    if (is_glob(p)) {
      for (const std::string& m : expand_glob(p)) {
        std::error_code ec;
        if (fs::is_directory(m, ec)) {
          auto inside = resolve_dataset_files(m);
          files.insert(files.end(), inside.begin(), inside.end());
        } else {
          (void)file_type(m);
          files.push_back(m);
        }
      }
      continue;
    }
    // As given, then under $TITAN_DATASETS_DIR.
    std::vector<std::string> candidates = {p};
    if (const std::string root = datasets_root(); !root.empty() && fs::path(p).is_relative())
      candidates.push_back((fs::path(root) / p).string());
    bool found = false;
    for (const std::string& c : candidates) {
      std::error_code ec;
      const std::string parent = fs::path(c).parent_path().string();
      if (fs::is_directory(c, ec)) {
        if (!hf_shards(c).empty()) {
          auto shards = hf_split_files(c, "train");
          files.insert(files.end(), shards.begin(), shards.end());
        } else {
          std::vector<std::string> inside;
          for (auto& e : fs::directory_iterator(c))
            if (e.is_regular_file() && is_dataset_file(e.path().string())) inside.push_back(e.path().string());
          std::sort(inside.begin(), inside.end());
          TITAN_CHECK(!inside.empty(), c, ": folder holds no dataset files (", known_dataset_extensions(),
                      ") and no Hugging Face data/<split>-NNNNN-of-NNNNN shards");
          files.insert(files.end(), inside.begin(), inside.end());
        }
      } else if (fs::exists(c, ec)) {
        (void)file_type(c);  // an unknown format is an error here, before any work
        files.push_back(c);
      } else if (!parent.empty() && fs::is_directory(parent, ec) && !hf_shards(parent).empty()) {
        auto shards = hf_split_files(parent, fs::path(c).filename().string());  // folder/<split>
        files.insert(files.end(), shards.begin(), shards.end());
      } else {
        continue;
      }
      found = true;
      break;
    }
    if (!found) {
      std::vector<std::string> names;
      for (auto& d : dataset_registry()) names.push_back(d.name);
      std::string hint = closest_match(p, names);
      fail("dataset '", p, "' is neither a registered name (", [&] {
        std::string s;
        for (auto& n : names) s += (s.empty() ? "" : ", ") + n;
        return s;
      }(), ") nor an existing path", datasets_root().empty() ? "" : " (nor one under $TITAN_DATASETS_DIR)",
           hint.empty() ? "" : " (did you mean " + hint + "?)");
    }
  }
  TITAN_CHECK(!files.empty(), "dataset '", name_or_path, "': no files");
  return files;
}

std::vector<uint32_t> encode_long_text(const Tokenizer& tok, std::string_view text, int threads) {
  constexpr size_t kPiece = 256 * 1024;
  if (threads <= 0) threads = num_threads();
  if (threads == 1 || text.size() < 2 * kPiece || !tok.splits_after_newline()) return tok.encode(text);
  std::vector<size_t> cuts = {0};
  for (size_t p = kPiece; p < text.size(); p += kPiece) {
    size_t i = std::max(p, cuts.back() + 1);
    while (i < text.size() && !(text[i - 1] == '\n' && text[i] >= 0x21 && text[i] <= 0x7E)) ++i;
    if (i >= text.size()) break;
    cuts.push_back(i);
    p = i;
  }
  cuts.push_back(text.size());
  std::vector<std::string> pieces;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) pieces.emplace_back(text.substr(cuts[k], cuts[k + 1] - cuts[k]));
  auto parts = tok.encode_batch(pieces, threads);
  std::vector<uint32_t> ids;
  for (auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

TokenizeStats tokenize_files(const std::vector<std::string>& files, const Tokenizer& tok, const DatasetSpec& spec,
                             const DocumentSink& out, const std::string& label) {
  TokenizeStats st;
  uint64_t total_bytes = 0;
  for (auto& f : files) {
    check_regular_file(f);  // a named pipe would block open() for ever
    std::error_code ec;
    auto sz = fs::file_size(f, ec);
    TITAN_CHECK(!ec, f, ": cannot read: ", ec.message());
    total_bytes += sz;
  }
  Progress progress(label, total_bytes, spec.progress);
  int threads = spec.threads > 0 ? spec.threads : num_threads();
  constexpr size_t kBatchDocs = 1024, kBatchBytes = 8 << 20;
  for (const std::string& f : files) {
    const FileType type = file_type(f);
    TITAN_CHECK(type.format != FileFormat::Tokens, f,
                ": already a token file; use it directly instead of tokenizing it");
    uint64_t docs_before = st.documents;
    DocOptions o;
    o.field = spec.text_field;
    o.skip_bad_rows = spec.skip_bad_lines;
    o.bad_row_hint = spec.bad_line_hint;
    auto reader = open_doc_reader(f, o);
    uint64_t bytes_before = st.bytes;
    if (type.format == FileFormat::Text) {
      Document doc;
      TITAN_CHECK(reader->next(&doc), f, ": empty file, no documents");
      auto ids = encode_long_text(tok, doc.text, threads);
      out(ids);
      st.tokens += ids.size();
      ++st.documents;
      st.bytes = bytes_before + reader->bytes_read();
      progress.update(st.bytes, human_count(double(st.tokens)) + " tokens");
      continue;
    }
    std::vector<std::string> batch;
    size_t batch_bytes = 0;
    auto flush = [&] {
      for (auto& ids : tok.encode_batch(batch, threads)) {
        out(ids);
        st.tokens += ids.size();
        ++st.documents;
      }
      batch.clear();
      batch_bytes = 0;
      progress.update(bytes_before + reader->bytes_read(), human_count(double(st.tokens)) + " tokens");
    };
    Document doc;
    while (reader->next(&doc)) {
      batch_bytes += doc.text.size();
      batch.push_back(std::move(doc.text));
      if (batch.size() >= kBatchDocs || batch_bytes >= kBatchBytes) flush();
    }
    flush();
    st.bytes = bytes_before + reader->bytes_read();
    st.skipped += reader->skipped();
    TITAN_CHECK(st.documents > docs_before, f, ": no documents",
                reader->skipped() ? " (all " + std::to_string(reader->skipped()) + " rows were bad and skipped)"
                                  : std::string());
  }
  progress.finish(std::to_string(st.documents) + " documents, " + human_bytes(double(st.bytes)) + ", " +
                  std::to_string(st.tokens) + " tokens" +
                  (st.skipped ? ", " + std::to_string(st.skipped) + " bad rows skipped" : std::string()));
  return st;
}

namespace {

uint64_t fnv1a_mix(uint64_t h, std::string_view s) {
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// Identity of a text source for the cache: absolute path, size, mtime, tokenizer and options.
std::string cache_name(const std::string& file, const Tokenizer& tok, const DatasetSpec& spec) {
  struct stat st {};
  TITAN_CHECK(::stat(file.c_str(), &st) == 0, file, ": cannot stat");
  uint64_t h = 1469598103934665603ull;
  h = fnv1a_mix(h, fs::absolute(file).string());
  h = fnv1a_mix(h, std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                       std::to_string(st.st_mtim.tv_nsec));
  h = fnv1a_mix(h, std::to_string(tok.fingerprint()) + ":" + spec.text_field + ":" + (spec.skip_bad_lines ? "1" : "0"));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return fs::path(file).stem().string() + "-" + hex + ".bin";
}

// Cache upkeep never stops a run: a folder that cannot be listed or a file that cannot be removed
// is logged and left.
void remove_stale_cache_temps(const std::string& dir, const LogFn& log) {
  try {
    for (const CacheFile& t : remove_stale_temps(dir))
      log("data: removed " + t.path + " (" + human_bytes(double(t.bytes)) + "), left by a tokenization that was killed");
  } catch (const Error& e) {
    log(std::string("data: token cache upkeep: ") + e.what());
  }
}

void evict_over_bound(const std::string& dir, uint64_t max_bytes, const std::vector<std::string>& keep, const LogFn& log) {
  try {
    for (const CacheFile& f : evict_cache(dir, max_bytes, keep))
      log("data: token cache above its bound of " + human_bytes(double(max_bytes)) + " (TITAN_CACHE_MAX_BYTES): evicted " +
          f.path + " (" + human_bytes(double(f.bytes)) + ", least recently used)");
  } catch (const Error& e) {
    log(std::string("data: token cache upkeep: ") + e.what());
  }
}

}  // namespace

void TokenDataset::add_segment(const uint32_t* data, uint64_t size) {
  if (size == 0) return;
  segments_.push_back(Segment{data, size, total_});
  total_ += size;
}

std::shared_ptr<const TokenDataset> TokenDataset::from_tokens(std::string name, std::vector<uint32_t> tokens,
                                                              uint64_t documents) {
  auto d = std::make_shared<TokenDataset>();
  d->name_ = std::move(name);
  TITAN_CHECK(!tokens.empty(), "dataset ", d->name_, ": no tokens");
  d->owned_.push_back(std::move(tokens));
  d->add_segment(d->owned_.back().data(), d->owned_.back().size());
  d->documents_ = documents;
  return d;
}

std::shared_ptr<const TokenDataset> TokenDataset::load(const DatasetSpec& spec, const Tokenizer& tok, const LogFn& log) {
  auto d = std::make_shared<TokenDataset>();
  d->name_ = spec.name_or_path;
  std::vector<std::string> files = resolve_dataset_files(spec.name_or_path);
  uint32_t eot = tok.eot_id();
  bool cache_opened = false;
  uint64_t max_cache_bytes = 0;  // read (from TITAN_CACHE_MAX_BYTES by default) when the cache is first used
  std::vector<std::string> cache_used;  // this dataset's cache files: never evicted for each other
  for (const std::string& f : files) {
    if (file_type(f).format == FileFormat::Tokens) {
      auto tf = TokenFile::open(f);
      const TokenFileHeader& h = tf->header();
      TITAN_CHECK(h.vocab_size <= tok.vocab_size(), f, ": vocab size ", h.vocab_size, " exceeds the tokenizer's ",
                  tok.vocab_size());
      TITAN_CHECK(h.tokenizer_fingerprint == 0 || h.tokenizer_fingerprint == tok.fingerprint(), f,
                  ": tokenized with a different tokenizer.json than ", tok.origin(), "; re-run titan tokenize");
      TITAN_CHECK(tf->size() > 0, f, ": no tokens");
      d->documents_ += h.document_count;
      d->add_segment(tf->tokens(), tf->size());
      d->files_.push_back(std::move(tf));
      continue;
    }
    std::string cache_dir = spec.cache_dir.empty() ? default_cache_dir() : spec.cache_dir;
    std::string cached;
    if (cache_dir != "none") {
      std::error_code ec;
      fs::create_directories(cache_dir, ec);
      if (ec || ::access(cache_dir.c_str(), W_OK) != 0) {
        log("data: cache folder " + cache_dir + " is not writable; tokenizing " + f + " in memory");
      } else {
        cached = (fs::path(cache_dir) / cache_name(f, tok, spec)).string();
        if (!cache_opened) {
          cache_opened = true;
          max_cache_bytes = spec.max_cache_bytes ? spec.max_cache_bytes : default_cache_max_bytes();
          remove_stale_cache_temps(cache_dir, log);
        }
        cache_used.push_back(cached);
      }
    }
    if (!cached.empty() && fs::exists(cached)) {
      try {
        auto tf = TokenFile::open(cached);
        mark_cache_use(cached);
        d->documents_ += tf->header().document_count;
        d->add_segment(tf->tokens(), tf->size());
        d->files_.push_back(std::move(tf));
        log("data: " + f + ": " + std::to_string(d->files_.back()->size()) + " tokens from cache " + cached);
        continue;
      } catch (const Error& e) {
        log(std::string("data: ignoring unreadable cache (") + e.what() + "); tokenizing again");
      }
    }
    if (!cached.empty()) {
      TokenFileWriter w(cached, tok.vocab_size(), eot, tok.fingerprint(), /*cache_file=*/true);
      TokenizeStats st = tokenize_files({f}, tok, spec, [&](const std::vector<uint32_t>& ids) { w.add_document(ids); },
                                        "data: tokenizing " + fs::path(f).filename().string());
      w.close();
      if (st.skipped) log("data: " + f + ": skipped " + std::to_string(st.skipped) + " bad rows");
      auto tf = TokenFile::open(cached);  // mapped first: another process's eviction cannot take it now
      evict_over_bound(cache_dir, max_cache_bytes, cache_used, log);
      d->documents_ += tf->header().document_count;
      d->add_segment(tf->tokens(), tf->size());
      d->files_.push_back(std::move(tf));
    } else {
      std::vector<uint32_t> toks;
      uint64_t docs = 0;
      TokenizeStats st = tokenize_files({f}, tok, spec,
                                        [&](const std::vector<uint32_t>& ids) {
                                          toks.insert(toks.end(), ids.begin(), ids.end());
                                          toks.push_back(eot);
                                          ++docs;
                                        },
                                        "data: tokenizing " + fs::path(f).filename().string());
      if (st.skipped) log("data: " + f + ": skipped " + std::to_string(st.skipped) + " bad rows");
      d->documents_ += docs;
      d->owned_.push_back(std::move(toks));
      d->add_segment(d->owned_.back().data(), d->owned_.back().size());
    }
  }
  TITAN_CHECK(d->total_ > 0, "dataset ", spec.name_or_path, ": no tokens");
  return d;
}

void TokenDataset::read(uint64_t pos, size_t n, int64_t* out) const {
  TITAN_ASSERT(total_ > 0);
  pos %= total_;
  // Segment holding pos: the last one starting at or before it.
  size_t s = size_t(std::upper_bound(segments_.begin(), segments_.end(), pos,
                                     [](uint64_t p, const Segment& g) { return p < g.start; }) -
                    segments_.begin()) - 1;
  uint64_t off = pos - segments_[s].start;
  while (n) {
    const Segment& g = segments_[s];
    size_t take = size_t(std::min<uint64_t>(n, g.size - off));
    for (size_t i = 0; i < take; ++i) out[i] = int64_t(g.data[off + i]);
    out += take;
    n -= take;
    off = 0;
    s = (s + 1) % segments_.size();
  }
}

}  // namespace titan::data
