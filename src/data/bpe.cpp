#include "data/bpe.h"

#include <algorithm>
#include <atomic>
#include <queue>

#include "core/error.h"

namespace titan::data {

namespace {

std::atomic<uint64_t> g_next_instance{1};

// Per-thread word -> ids cache. Words longer than kMaxCachedWord bytes are rare and not cached,
// and the cache is dropped when it reaches kMaxCacheEntries to bound memory.
constexpr size_t kMaxCachedWord = 256;
constexpr size_t kMaxCacheEntries = 1 << 16;

struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<uint32_t>, StringViewHash, std::equal_to<>> words;
};
thread_local WordCache t_cache;

constexpr uint32_t kNoRank = 0xFFFFFFFFu;

}  // namespace

void BpeModel::insert_merge(uint32_t a, uint32_t b, uint32_t rank, uint32_t new_id) {
  uint64_t key = (uint64_t(a) << 32) | b;
  size_t i = size_t((key * 0x9E3779B97F4A7C15ull) >> shift_);
  for (;;) {
    MergeEntry& e = table_[i];
    if (e.key == key || e.key == ~uint64_t(0)) {
      e = MergeEntry{key, rank, new_id};
      return;
    }
    i = (i + 1) & (table_.size() - 1);
  }
}

void BpeModel::build(std::vector<std::pair<std::string, uint32_t>> vocab,
                     const std::vector<std::pair<std::string, std::string>>& merges, const std::string& origin) {
  TITAN_CHECK(!vocab.empty(), origin, ": the BPE vocabulary is empty");
  uint32_t max_id = 0;
  for (auto& [tok, id] : vocab) max_id = std::max(max_id, id);
  // Ids index dense tables, so they must be close to the vocabulary's size.
  TITAN_CHECK(max_id < 2 * vocab.size() + 1024, origin, ": token id ", max_id, " is far beyond the ", vocab.size(),
              " vocabulary entries");
  id_to_bytes_.assign(size_t(max_id) + 1, std::string());
  id_present_.assign(size_t(max_id) + 1, false);
  bytes_to_id_.clear();
  bytes_to_id_.reserve(vocab.size());
  for (auto& [tok, id] : vocab) {
    TITAN_CHECK(!id_present_[id], origin, ": token id ", id, " appears twice in the vocabulary");
    id_present_[id] = true;
    auto [it, fresh] = bytes_to_id_.emplace(tok, id);
    TITAN_CHECK(fresh, origin, ": the vocabulary lists one token under two ids (", it->second, " and ", id, ")");
    id_to_bytes_[id] = std::move(tok);
  }
  missing_bytes_ = false;
  for (int b = 0; b < 256; ++b) {
    auto it = bytes_to_id_.find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    byte_id_[b] = it == bytes_to_id_.end() ? kNoByte : it->second;
    missing_bytes_ |= it == bytes_to_id_.end();
  }
  size_t cap = 16;
  while (cap < merges.size() * 2 + 16) cap <<= 1;
  table_.assign(cap, MergeEntry{});
  shift_ = 64 - __builtin_ctzll(cap);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    int64_t ia = find(a), ib = find(b), im = find(a + b);
    TITAN_CHECK(ia >= 0 && ib >= 0 && im >= 0, origin, ": merge ", r, " uses a token missing from the vocabulary");
    insert_merge(uint32_t(ia), uint32_t(ib), uint32_t(r), uint32_t(im));
  }
  instance_ = g_next_instance.fetch_add(1);
}

int64_t BpeModel::find(std::string_view bytes) const {
  auto it = bytes_to_id_.find(bytes);
  return it == bytes_to_id_.end() ? -1 : int64_t(it->second);
}

void BpeModel::encode_word(std::string_view word, std::vector<uint32_t>& out) const {
  if (missing_bytes_) {
    size_t k = 0;
    while (k < word.size() && byte_id_[static_cast<uint8_t>(word[k])] != kNoByte) ++k;
    if (k < word.size()) {  // drop the bytes without a token, then encode what is left
      std::string kept;
      for (char ch : word)
        if (byte_id_[static_cast<uint8_t>(ch)] != kNoByte) kept.push_back(ch);
      if (!kept.empty()) encode_word(kept, out);
      return;
    }
  }
  if (word.size() == 1) {
    out.push_back(byte_id_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (word.size() > kMaxCachedWord) {
    encode_word_uncached(word, out);
    return;
  }
  WordCache& c = t_cache;
  if (c.owner != instance_) {
    c.words.clear();
    c.owner = instance_;
  }
  auto it = c.words.find(word);
  if (it != c.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  size_t start = out.size();
  encode_word_uncached(word, out);
  if (c.words.size() >= kMaxCacheEntries) c.words.clear();
  c.words.emplace(std::string(word), std::vector<uint32_t>(out.begin() + std::ptrdiff_t(start), out.end()));
}

void BpeModel::encode_word_uncached(std::string_view word, std::vector<uint32_t>& out) const {
  // The scan costs O(n^2) but is faster than a heap on the short words that dominate text.
  if (word.size() <= 64) {
    encode_word_scan(word, out);
  } else {
    encode_word_heap(word, out);
  }
}

void BpeModel::encode_word_scan(std::string_view word, std::vector<uint32_t>& out) const {
  size_t n = word.size();
  if (n == 0) return;
  std::vector<uint32_t> ids(n), rank(n), merged(n);
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[static_cast<uint8_t>(word[i])];
  // rank[i]: rank of merging ids[i] with ids[i+1] (kNoRank when no merge or no right neighbour).
  auto pair_rank = [&](size_t i) {
    if (i + 1 >= n || !lookup(ids[i], ids[i + 1], &rank[i], &merged[i])) rank[i] = kNoRank;
  };
  for (size_t i = 0; i < n; ++i) pair_rank(i);
  for (;;) {
    size_t best = n;
    uint32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (rank[i] < best_rank) {
        best_rank = rank[i];
        best = i;
      }
    }
    if (best == n) break;
    ids[best] = merged[best];
    // Drop symbol best+1 by shifting the tail left.
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    pair_rank(best);
    if (best > 0) pair_rank(best - 1);
  }
  out.insert(out.end(), ids.begin(), ids.begin() + std::ptrdiff_t(n));
}

void BpeModel::encode_word_heap(std::string_view word, std::vector<uint32_t>& out) const {
  int64_t n = int64_t(word.size());
  if (n == 0) return;
  struct Sym {
    uint32_t id;
    int64_t prev, next;
    bool alive;
  };
  std::vector<Sym> sym(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    sym[size_t(i)] = Sym{byte_id_[static_cast<uint8_t>(word[size_t(i)])], i - 1, i + 1 < n ? i + 1 : -1, true};
  // Candidate merges ordered by (rank, position of the left symbol): the same order as the scan.
  struct Cand {
    uint32_t rank;
    int64_t pos;
    uint32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int64_t left) {
    if (left < 0) return;
    int64_t right = sym[size_t(left)].next;
    if (right < 0) return;
    uint32_t r, id;
    if (lookup(sym[size_t(left)].id, sym[size_t(right)].id, &r, &id)) heap.push(Cand{r, left, id});
  };
  for (int64_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Cand c = heap.top();
    heap.pop();
    Sym& left = sym[size_t(c.pos)];
    if (!left.alive || left.next < 0) continue;
    Sym& right = sym[size_t(left.next)];
    uint32_t r, id;
    // Stale entry: the pair at this position changed since it was pushed.
    if (!lookup(left.id, right.id, &r, &id) || id != c.new_id || r != c.rank) continue;
    left.id = id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) sym[size_t(right.next)].prev = c.pos;
    push(left.prev);
    push(c.pos);
  }
  for (int64_t i = 0; i >= 0; i = sym[size_t(i)].next) out.push_back(sym[size_t(i)].id);
}

}  // namespace titan::data
