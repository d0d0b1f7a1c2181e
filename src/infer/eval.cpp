#include "infer/eval.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/tensor.h"
#include "model/decoder.h"
#include "ops/cross_entropy/cross_entropy.h"

namespace titan::infer {

std::vector<Window> sliding_windows(int64_t n, int64_t seq_len, int64_t stride) {
  TITAN_CHECK(seq_len >= 2, "--seq-len must be at least 2, got ", seq_len);
  TITAN_CHECK(stride >= 1 && stride <= seq_len, "--stride must be in [1, --seq-len ", seq_len, "], got ", stride);
  TITAN_CHECK(n >= 2, "the evaluation data has ", n, " tokens; at least 2 are needed to score one");
  std::vector<Window> w;
  int64_t prev_end = 0;
  for (int64_t begin = 0; begin < n; begin += stride) {
    const int64_t end = std::min(begin + seq_len, n);
    w.push_back({begin, end, prev_end, std::max(prev_end, begin + 1)});
    prev_end = end;
    if (end == n) break;
  }
  return w;
}

double EvalResult::perplexity() const { return std::exp(loss()); }

EvalResult evaluate(DecoderModel& model, const std::vector<uint32_t>& ids, int64_t seq_len, int64_t stride,
                    const std::function<void(int64_t, int64_t)>& progress) {
  const std::vector<Window> windows = sliding_windows(int64_t(ids.size()), seq_len, stride);
  EvalResult res;
  double guide_sum = 0;
  int64_t guide_count = 0;
  for (const Window& w : windows) {
    const int64_t S = w.end - w.begin;
    if (w.first_target >= w.end) {  // nothing to score
      ++res.windows;
      if (progress) progress(res.windows, int64_t(windows.size()));
      continue;
    }
    Tensor x = Tensor::empty({1, S}, DType::I64), labels = Tensor::empty({1, S}, DType::I64);
    for (int64_t t = 0; t < S; ++t) {
      x.data<int64_t>()[t] = int64_t(ids[size_t(w.begin + t)]);
      // Position t predicts token begin + t + 1.
      const int64_t target = w.begin + t + 1;
      labels.data<int64_t>()[t] = (target < w.end && target >= w.first_target) ? int64_t(ids[size_t(target)]) : -100;
    }
    const double sum = model.forward(x, labels);
    const int64_t count = count_labels(labels);
    res.nll_sum += sum;
    res.tokens += count;
    // The guide: trg_len = end - prev_end target tokens, weighted as trg_len - 1.
    const int64_t trg_len = w.end - w.prev_end;
    guide_sum = std::fma(sum / double(count), double(trg_len - 1), guide_sum);  // one rounding on every target
    guide_count += trg_len - 1;
    ++res.windows;
    if (progress) progress(res.windows, int64_t(windows.size()));
  }
  res.guide_loss = guide_count ? guide_sum / double(guide_count) : 0;
  return res;
}

}  // namespace titan::infer
