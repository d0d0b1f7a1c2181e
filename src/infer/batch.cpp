#include "infer/batch.h"

#include <algorithm>

#include "core/error.h"

namespace titan::infer {

LeftPaddedBatch LeftPaddedBatch::make(const std::vector<std::vector<uint32_t>>& prompts, uint32_t pad_id) {
  LeftPaddedBatch b;
  b.rows = int64_t(prompts.size());
  b.pad_id = pad_id;
  for (size_t r = 0; r < prompts.size(); ++r) {
    TITAN_CHECK(!prompts[r].empty(), "prompt ", r, " is empty: generation needs at least one prompt token");
    b.width = std::max<int64_t>(b.width, int64_t(prompts[r].size()));
  }
  b.ids.assign(size_t(b.rows * b.width), pad_id);
  b.mask.assign(size_t(b.rows * b.width), 0);
  b.positions.assign(size_t(b.rows * b.width), 1);
  for (int64_t r = 0; r < b.rows; ++r) {
    const auto& p = prompts[size_t(r)];
    const int64_t pad = b.width - int64_t(p.size());
    b.pad.push_back(pad);
    for (int64_t c = 0; c < int64_t(p.size()); ++c) {
      const size_t k = size_t(r * b.width + pad + c);
      b.ids[k] = p[size_t(c)];
      b.mask[k] = 1;
      b.positions[k] = c;
    }
  }
  return b;
}

void LeftPaddedBatch::append(const std::vector<uint32_t>& next, const std::vector<bool>& active) {
  TITAN_ASSERT(int64_t(next.size()) == rows && int64_t(active.size()) == rows);
  const int64_t w = width + 1;
  std::vector<uint32_t> ni(size_t(rows * w));
  std::vector<uint8_t> nm(size_t(rows * w));
  std::vector<int64_t> np(size_t(rows * w));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(ids.begin() + r * width, width, ni.begin() + r * w);
    std::copy_n(mask.begin() + r * width, width, nm.begin() + r * w);
    std::copy_n(positions.begin() + r * width, width, np.begin() + r * w);
    ni[size_t(r * w + width)] = active[size_t(r)] ? next[size_t(r)] : pad_id;
    nm[size_t(r * w + width)] = 1;
    np[size_t(r * w + width)] = width > 0 ? positions[size_t(r * width + width - 1)] + 1 : 0;
  }
  ids = std::move(ni);
  mask = std::move(nm);
  positions = std::move(np);
  width = w;
}

std::vector<uint32_t> LeftPaddedBatch::row(int64_t r) const {
  return std::vector<uint32_t>(ids.begin() + r * width + pad[size_t(r)], ids.begin() + (r + 1) * width);
}

}  // namespace titan::infer
