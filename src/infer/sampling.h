// Next-token choice with transformers' logits processors, in the order `generate` applies them:
//   1. repetition penalty (every distinct id of the sequence so far, prompt included: a logit
//      s < 0 becomes s * penalty, else s / penalty)            RepetitionPenaltyLogitsProcessor
//   then, when sampling (temperature > 0):
//   2. temperature: s / T                                       TemperatureLogitsWarper
//   3. top-k: drop logits below the k-th largest (ties kept)    TopKLogitsWarper
//   4. top-p: sort ascending, drop tokens whose cumulative probability is <= 1 - p, keeping at
//      least the most likely one                                TopPLogitsWarper
//   5. min-p: drop tokens whose probability is below min_p * max probability (top one kept)
//                                                               MinPLogitsWarper
// Dropped logits become -inf; the token is drawn from the softmax of what is left. Temperature 0
// means greedy: the argmax after step 1 (the first index on ties), warpers not applied — what
// generate(do_sample=False) does.
//
// Draws are reproducible and independent of thread count and batch composition: the uniform for
// step t of stream s (a prompt's index) is Philox(seed, s) block t, and the token is the first
// index at which the cumulative probability (in vocabulary order, double precision) reaches it.
// The numbers differ from torch.multinomial's: only the distribution is transformers'.
#pragma once
#include <cstdint>
#include <vector>

namespace titan::infer {

struct SamplingParams {
  double temperature = 0;           // 0: greedy
  int64_t top_k = 0;                // 0: off
  double top_p = 1.0;               // 1: off
  double min_p = 0;                 // 0: off
  double repetition_penalty = 1.0;  // 1: off
  uint64_t seed = 0;
  bool greedy() const { return temperature == 0; }
};

// Errors (naming the option as on the command line) on values transformers rejects too:
// temperature < 0, top_k < 0, top_p outside (0, 1], min_p outside [0, 1], penalty <= 0.
void validate(const SamplingParams& p);

// Each processor works in place on one row of V logits (f32, as transformers' scores).
void apply_repetition_penalty(float* scores, int64_t V, const std::vector<uint32_t>& context, double penalty);
void apply_temperature(float* scores, int64_t V, double temperature);
void apply_top_k(float* scores, int64_t V, int64_t k);
void apply_top_p(float* scores, int64_t V, double p);
void apply_min_p(float* scores, int64_t V, double min_p);
// All that `p` turns on, in generate's order (warpers only when sampling).
void process_logits(float* scores, int64_t V, const std::vector<uint32_t>& context, const SamplingParams& p);

// softmax(scores) in double; -inf scores get probability 0.
std::vector<double> probabilities(const float* scores, int64_t V);
// First index of the largest score.
int64_t argmax(const float* scores, int64_t V);
// The first index whose cumulative probability reaches u * total, u in (0, 1).
int64_t draw(const std::vector<double>& probs, double u);
// Uniform in (0, 1) with 53 random bits: Philox(seed, stream), block `step`.
double philox_uniform(uint64_t seed, uint64_t stream, uint64_t step);

// Processes `scores` in place and returns the next token of `stream` at `step`.
int64_t choose_next(float* scores, int64_t V, const std::vector<uint32_t>& context, const SamplingParams& p,
                    uint64_t stream, uint64_t step);

}  // namespace titan::infer
