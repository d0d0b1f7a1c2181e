#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace titan::infer {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

void validate(const SamplingParams& p) {
  TITAN_CHECK(std::isfinite(p.temperature) && p.temperature >= 0, "--temperature must be >= 0 (0: greedy), got ",
              p.temperature);
  TITAN_CHECK(p.top_k >= 0, "--top-k must be >= 0 (0: off), got ", p.top_k);
  TITAN_CHECK(p.top_p > 0 && p.top_p <= 1, "--top-p must be in (0, 1] (1: off), got ", p.top_p);
  TITAN_CHECK(p.min_p >= 0 && p.min_p <= 1, "--min-p must be in [0, 1] (0: off), got ", p.min_p);
  TITAN_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0,
              "--repetition-penalty must be > 0 (1: off), got ", p.repetition_penalty);
}

void apply_repetition_penalty(float* scores, int64_t V, const std::vector<uint32_t>& context, double penalty) {
  if (penalty == 1.0) return;
  // Each distinct id once (transformers gathers, then scatters: repeats change nothing). Ids at or
  // beyond V cannot be generated and are skipped, as transformers does.
  std::vector<uint32_t> ids(context);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const float pen = float(penalty);
  for (uint32_t id : ids) {
    if (int64_t(id) >= V) continue;
    float& s = scores[id];
    s = s < 0 ? s * pen : s / pen;
  }
}

void apply_temperature(float* scores, int64_t V, double temperature) {
  if (temperature == 1.0) return;
  const double t = temperature;
  for (int64_t i = 0; i < V; ++i) scores[i] = float(double(scores[i]) / t);
}

void apply_top_k(float* scores, int64_t V, int64_t k) {
  if (k <= 0) return;
  k = std::min(k, V);
  std::vector<float> v(scores, scores + V);
  std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), std::greater<float>());
  const float kth = v[size_t(k - 1)];
  for (int64_t i = 0; i < V; ++i)
    if (scores[i] < kth) scores[i] = kNegInf;
}

void apply_top_p(float* scores, int64_t V, double p) {
  if (p >= 1.0) return;
  // Ascending by score, softmax, cumulative sum; drop while cum <= 1 - p, never the last (most
  // likely) one. Among equal scores the lower index ranks higher (sorts later), as argmax picks
  // it; torch.sort leaves the order of ties unspecified (the fixture's tie row has it this way).
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return scores[a] < scores[b] || (scores[a] == scores[b] && a > b); });
  std::vector<double> prob = probabilities(scores, V);
  const double threshold = 1.0 - p;
  double cum = 0;
  std::vector<int64_t> drop;
  for (int64_t r = 0; r + 1 < V; ++r) {
    cum += prob[size_t(order[size_t(r)])];
    if (cum <= threshold) drop.push_back(order[size_t(r)]);
  }
  for (int64_t i : drop) scores[i] = kNegInf;
}

void apply_min_p(float* scores, int64_t V, double min_p) {
  if (min_p <= 0) return;
  std::vector<double> prob = probabilities(scores, V);
  const int64_t top = argmax(scores, V);
  const double cut = min_p * prob[size_t(top)];
  for (int64_t i = 0; i < V; ++i)
    if (i != top && prob[size_t(i)] < cut) scores[i] = kNegInf;
}

void process_logits(float* scores, int64_t V, const std::vector<uint32_t>& context, const SamplingParams& p) {
  apply_repetition_penalty(scores, V, context, p.repetition_penalty);
  if (p.greedy()) return;
  apply_temperature(scores, V, p.temperature);
  apply_top_k(scores, V, p.top_k);
  apply_top_p(scores, V, p.top_p);
  apply_min_p(scores, V, p.min_p);
}

std::vector<double> probabilities(const float* scores, int64_t V) {
  std::vector<double> out(size_t(V), 0.0);
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(scores[i]));
  TITAN_CHECK(std::isfinite(mx), "next-token scores have no finite value (NaN or all -inf logits)");
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (scores[i] == kNegInf) continue;
    TITAN_CHECK(!std::isnan(scores[i]), "next-token logits contain NaN");
    out[size_t(i)] = std::exp(double(scores[i]) - mx);
    sum += out[size_t(i)];
  }
  for (double& v : out) v /= sum;
  return out;
}

int64_t argmax(const float* scores, int64_t V) {
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (scores[i] > scores[best]) best = i;
  TITAN_CHECK(!std::isnan(scores[best]), "next-token logits contain NaN");
  return best;
}

int64_t draw(const std::vector<double>& probs, double u) {
  double total = 0;
  for (double p : probs) total += p;
  const double target = u * total;
  double cum = 0;
  int64_t last = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    cum += probs[i];
    last = int64_t(i);
    if (cum >= target) return last;
  }
  TITAN_ASSERT(last >= 0, "draw from an empty distribution");
  return last;  // rounding: u * total above the summed mass
}

double philox_uniform(uint64_t seed, uint64_t stream, uint64_t step) {
  uint32_t w[4];
  Philox{seed, stream}.block(step, w);
  const uint64_t bits = (uint64_t(w[0]) << 21) ^ (uint64_t(w[1]) >> 11);  // 53 bits
  return (double(bits & ((uint64_t(1) << 53) - 1)) + 0.5) * 0x1p-53;
}

int64_t choose_next(float* scores, int64_t V, const std::vector<uint32_t>& context, const SamplingParams& p,
                    uint64_t stream, uint64_t step) {
  process_logits(scores, V, context, p);
  if (p.greedy()) return argmax(scores, V);
  return draw(probabilities(scores, V), philox_uniform(p.seed, stream, step));
}

}  // namespace titan::infer
