// Byte-level BPE model: token ids for one pre-token, merging adjacent symbols by merge rank as
// Hugging Face `tokenizers` does (the lowest-ranked adjacent pair first, the leftmost on ties,
// until no adjacent pair has a merge). Tokens are kept as raw bytes: the GPT-2 byte-to-character
// mapping of tokenizer.json is undone once at load, so encoding never builds byte-level strings.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace titan::data {

// Hash for heterogeneous lookup of std::string keys by std::string_view.
struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  // `vocab`: (token bytes, id); `merges`: (left bytes, right bytes) in rank order. `origin` names
  // the file in errors. A merge whose parts or result are missing from the vocabulary is an error;
  // a pair listed twice keeps its last rank, as `tokenizers` does.
  void build(std::vector<std::pair<std::string, uint32_t>> vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, const std::string& origin);

  // Appends the ids of one pre-token (raw bytes) to `out`. Thread-safe: words are cached per
  // thread, keyed by this model's identity. A byte the vocabulary has no token for is dropped
  // before merging, as `tokenizers`' BPE does without an unk_token (published byte-level
  // vocabularies such as SmolLM2's lack a few control bytes).
  void encode_word(std::string_view word, std::vector<uint32_t>& out) const;
  // The same without the cache, by the quadratic scan (small) or heap (long words) algorithm.
  void encode_word_uncached(std::string_view word, std::vector<uint32_t>& out) const;
  // The heap algorithm on any length; exposed so tests can compare the two paths.
  void encode_word_heap(std::string_view word, std::vector<uint32_t>& out) const;
  void encode_word_scan(std::string_view word, std::vector<uint32_t>& out) const;

  size_t size() const { return id_to_bytes_.size(); }  // max id + 1 of the BPE vocabulary
  bool has_id(uint32_t id) const { return id < id_to_bytes_.size() && id_present_[id]; }
  const std::string& token_bytes(uint32_t id) const { return id_to_bytes_[id]; }
  // Id of a token given by its raw bytes, or -1.
  int64_t find(std::string_view bytes) const;

 private:
  struct MergeEntry {
    uint64_t key = ~uint64_t(0);  // (left id << 32) | right id; all ones marks an empty slot
    uint32_t rank = 0;
    uint32_t new_id = 0;
  };
  // Rank and result of merging ids (a, b): false when the pair has no merge.
  bool lookup(uint32_t a, uint32_t b, uint32_t* rank, uint32_t* new_id) const {
    uint64_t key = (uint64_t(a) << 32) | b;
    size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> shift_);
    for (;;) {
      const MergeEntry& e = table_[i];
      if (e.key == key) {
        *rank = e.rank;
        *new_id = e.new_id;
        return true;
      }
      if (e.key == ~uint64_t(0)) return false;
      i = (i + 1) & (table_.size() - 1);
    }
  }
  void insert_merge(uint32_t a, uint32_t b, uint32_t rank, uint32_t new_id);

  static constexpr uint32_t kNoByte = ~uint32_t(0);
  uint32_t byte_id_[256] = {};  // kNoByte: no token for that byte
  bool missing_bytes_ = false;
  std::vector<MergeEntry> table_;
  int shift_ = 64;
  std::vector<std::string> id_to_bytes_;
  std::vector<bool> id_present_;
  std::unordered_map<std::string, uint32_t, StringViewHash, std::equal_to<>> bytes_to_id_;
  uint64_t instance_ = 0;  // unique per build(), keys the per-thread word caches
};

}  // namespace titan::data
