// Pipeline parallelism inside the decoder: the model cut into consecutive stages, each a range of
// parameter units (model/unit_schedule.h: unit 0 the embedding, 1 + l layer l, n + 1 the final
// norm and head). Stage 0 starts with the embedding, the last stage ends with the head; a rank
// builds only the units of the stages it holds (distributed/pp_schedule.h: stage s on rank s % pp),
// so its parameters, gradients and optimizer state are its stages' alone. A tied embedding is
// also the last stage's head: that rank holds a copy of the embedding unit, whose gradient is
// summed with the first stage's before each optimizer step (distributed/fsdp.h), so both copies
// take the same update and stay equal (torchtitan refuses a tied model under PP; this keeps the
// published small Qwen3 models, which are tied, trainable with it).
//
// One microbatch runs through a stage with DecoderModel::stage_forward (the embedding or the
// received activations in, the stage output out; the last stage keeps its output for the head)
// and stage_backward (the head's forward, loss and backward on the last stage, or the received
// output gradient; the stage's layers from the last; the embedding's backward on the first stage;
// returns the gradient of the stage input to send back).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace titan {

struct ModelConfig;

struct PipelineStages {
  int64_t num_stages = 1;
  // Stage s holds layers [layer_begin[s], layer_begin[s + 1]) (num_stages + 1 entries).
  std::vector<int64_t> layer_begin;
  std::vector<int64_t> held;  // the stages this rank holds, ascending (empty: every stage)

  bool on() const { return num_stages > 1; }
  bool holds(int64_t stage) const;
  // Unit range [first, end) of stage s.
  int64_t unit_begin(int64_t s, int64_t n_layers) const { return s == 0 ? 0 : 1 + layer_begin[size_t(s)]; }
  int64_t unit_end(int64_t s, int64_t n_layers) const {
    return s == num_stages - 1 ? n_layers + 2 : 1 + layer_begin[size_t(s + 1)];
  }
  // The stage whose unit range holds unit u (the embedding: stage 0).
  int64_t stage_of_unit(int64_t u, int64_t n_layers) const;
  // Whether this rank holds unit u (a tied embedding also on the rank of the last stage).
  bool holds_unit(int64_t u, int64_t n_layers, bool tied) const;
};

// The stages of a model of n_layers layers cut into `stages` stages: layers_per_stage > 0 puts
// that many layers in every stage but the first and last, which share the rest (torchtitan's
// pipeline_parallel_first/last_stage_less_layers, on the embedding's and head's side), else the
// layers split as evenly as possible (earlier stages one more). Every stage keeps at least one
// layer; refusals name [parallelism] keys in one line.
PipelineStages pipeline_stages(int64_t n_layers, int64_t stages, int64_t layers_per_stage = 0);
// The stages rank `rank` of `pp` holds (stage s on rank s % pp).
std::vector<int64_t> stages_of_rank(int64_t stages, int64_t pp, int64_t rank);
// "stage 1: layers 2-3 + head"
std::string describe_stage(const PipelineStages& p, int64_t stage);
// Every stage: "stage 0: embedding + layers 0-1 | stage 1: layers 2-3 + head"
std::string describe_stages(const PipelineStages& p);

}  // namespace titan
