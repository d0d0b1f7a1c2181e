// Pipeline stages of the decoder: see pipeline.h.
#include "model/pipeline.h"

#include <algorithm>

#include "core/error.h"

namespace titan {

bool PipelineStages::holds(int64_t stage) const {
  return held.empty() || std::find(held.begin(), held.end(), stage) != held.end();
}

int64_t PipelineStages::stage_of_unit(int64_t u, int64_t n_layers) const {
  int64_t s = 0;
  while (s + 1 < num_stages && u >= unit_end(s, n_layers)) ++s;
  return s;
}

bool PipelineStages::holds_unit(int64_t u, int64_t n_layers, bool tied) const {
  if (!on()) return true;
  if (u == 0 && tied && holds(num_stages - 1)) return true;
  for (int64_t s = 0; s < num_stages; ++s)
    if (holds(s) && u >= unit_begin(s, n_layers) && u < unit_end(s, n_layers)) return true;
  return false;
}

PipelineStages pipeline_stages(int64_t n_layers, int64_t stages, int64_t layers_per_stage) {
  TITAN_CHECK(stages >= 1, "pipeline parallelism: ", stages, " stages");
  TITAN_CHECK(stages <= n_layers, "pipeline parallelism: ", stages,
              " stages ([parallelism] pipeline_parallel_degree x stages per rank) for ", n_layers,
              " layers: every stage needs at least one layer");
  PipelineStages p;
  p.num_stages = stages;
  p.layer_begin.assign(size_t(stages) + 1, 0);
  if (layers_per_stage > 0 && stages > 1) {
    const int64_t middle = (stages - 2) * layers_per_stage, rest = n_layers - middle;
    TITAN_CHECK(rest >= 2, "pipeline parallelism: [parallelism] pipeline_parallel_layers_per_stage = ", layers_per_stage,
                " leaves ", rest, " of ", n_layers, " layers for the first and last stages (need at least one each)");
    const int64_t first = (rest + 1) / 2;  // the first stage takes the odd one
    p.layer_begin[1] = first;
    for (int64_t s = 2; s < stages; ++s) p.layer_begin[size_t(s)] = p.layer_begin[size_t(s - 1)] + layers_per_stage;
  } else {
    for (int64_t s = 0; s < stages; ++s)
      p.layer_begin[size_t(s + 1)] = p.layer_begin[size_t(s)] + n_layers / stages + (s < n_layers % stages ? 1 : 0);
  }
  p.layer_begin[size_t(stages)] = n_layers;
  return p;
}

std::vector<int64_t> stages_of_rank(int64_t stages, int64_t pp, int64_t rank) {
  std::vector<int64_t> v;
  for (int64_t s = rank; s < stages; s += pp) v.push_back(s);
  return v;
}

std::string describe_stage(const PipelineStages& p, int64_t s) {
  const int64_t a = p.layer_begin[size_t(s)], b = p.layer_begin[size_t(s + 1)];
  return "stage " + std::to_string(s) + ": " + (s == 0 ? "embedding + " : "") + "layers " + std::to_string(a) +
         (b - a > 1 ? "-" + std::to_string(b - 1) : "") + (s == p.num_stages - 1 ? " + head" : "");
}

std::string describe_stages(const PipelineStages& p) {
  std::string out;
  for (int64_t s = 0; s < p.num_stages; ++s) out += (s ? " | " : "") + describe_stage(p, s);
  return out;
}

}  // namespace titan
