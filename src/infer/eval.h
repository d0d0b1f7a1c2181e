// Perplexity by the sliding-window method of transformers' perplexity guide: windows of seq_len
// tokens starting every `stride` tokens (the last one ends at the stream's end); in each window
// the tokens after the previous window's end are the targets (the others get label -100), each
// predicted from all of the window's tokens before it. A window's first token has nothing before
// it, so it is never predicted: with stride < seq_len every token but the stream's first is
// scored exactly once; with stride = seq_len (no overlap) each window's first token is skipped,
// as in the guide. A last window with no token to score (one token long) is skipped (the guide's
// code would divide by zero there).
//
// The loss is the exact token-weighted mean: the sum of the scored tokens' negative
// log-likelihoods divided by their count (DecoderModel::forward returns the sum, count_labels the
// count). The guide weights each window's mean loss by trg_len - 1 (trg_len = end - previous
// end): right for the first window and when windows do not overlap, but one less than the count
// the window's mean is over for every later window of an overlapping run, so its average is
// slightly differently weighted. EvalResult::guide_loss reproduces the guide's figure.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace titan {
class DecoderModel;
}

namespace titan::infer {

struct Window {
  int64_t begin = 0, end = 0;  // tokens [begin, end) are the model input
  int64_t prev_end = 0;        // the previous window's end (0 for the first)
  int64_t first_target = 0;    // tokens [first_target, end) are scored: max(prev_end, begin + 1)
};

// The guide's windows over n tokens. Errors unless 1 <= stride <= seq_len and n >= 2.
std::vector<Window> sliding_windows(int64_t n, int64_t seq_len, int64_t stride);

struct EvalResult {
  double nll_sum = 0;      // sum over scored tokens
  int64_t tokens = 0;      // scored tokens
  int64_t windows = 0;
  double guide_loss = 0;   // the guide's weighting (see above)
  double loss() const { return tokens ? nll_sum / double(tokens) : 0; }
  double perplexity() const;
};

// progress(done_windows, total_windows) after each window, if given.
EvalResult evaluate(DecoderModel& model, const std::vector<uint32_t>& ids, int64_t seq_len, int64_t stride,
                    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace titan::infer
