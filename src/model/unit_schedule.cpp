#include "model/unit_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace titan {

std::string use_str(UnitUse u) {
  switch (u) {
    case UnitUse::None: return "nothing";
    case UnitUse::Values: return "values";
    case UnitUse::Grads: return "grads";
    case UnitUse::ValuesGrads: return "values+grads";
  }
  return "?";
}

std::string step_str(const UnitStep& s) {
  const std::string u = std::to_string(s.unit);
  switch (s.kind) {
    case UnitStep::Kind::Need: return "need " + u + " " + use_str(s.use);
    case UnitStep::Kind::Done: return "done " + u + " " + use_str(s.use);
    case UnitStep::Kind::Prefetch: return "prefetch " + u;
    case UnitStep::Kind::Run:
      return "run " + u + (s.phase == Phase::Forward ? " forward" : s.phase == Phase::Recompute ? " recompute" : " backward");
  }
  return "?";
}

std::vector<UnitStep> unit_schedule(const ModelConfig& c, Pass pass, Checkpointing ckpt) {
  using K = UnitStep::Kind;
  constexpr UnitUse V = UnitUse::Values, G = UnitUse::Grads, VG = UnitUse::ValuesGrads;
  const int64_t n = c.num_hidden_layers, head = n + 1;
  const bool tied = c.tie_word_embeddings, train = pass == Pass::Train;
  std::vector<UnitStep> s;
  auto need = [&](int64_t u, UnitUse use) { s.push_back({K::Need, u, use}); };
  auto done = [&](int64_t u, UnitUse use) { s.push_back({K::Done, u, use}); };
  auto prefetch = [&](int64_t u) { s.push_back({K::Prefetch, u}); };
  auto run = [&](int64_t u, Phase p) { s.push_back({K::Run, u, UnitUse::None, p}); };
  // Forward: the embedding, then each layer, each announcing the unit after it.
  for (int64_t u = 0; u <= n; ++u) {
    need(u, V);
    prefetch(u + 1);
    run(u, Phase::Forward);
    done(u, V);
  }
  // Head (a tied head reads the embedding's values and adds to its gradients).
  const UnitUse hu = train ? VG : V;
  need(head, hu);
  if (tied) need(0, hu);
  if (train && n > 0) prefetch(n);
  run(head, train ? Phase::Backward : Phase::Forward);
  if (tied) done(0, V);  // a tied embedding's gradients stay until the embedding's backward
  done(head, hu);
  if (!train) return s;
  for (int64_t u = n; u >= 1; --u) {
    need(u, VG);
    if (u > 1) prefetch(u - 1);
    if (ckpt != Checkpointing::None) run(u, Phase::Recompute);
    run(u, Phase::Backward);
    done(u, VG);
  }
  need(0, G);
  run(0, Phase::Backward);
  done(0, G);
  return s;
}

std::vector<UnitStep> stage_schedule(const ModelConfig& c, bool backward, int64_t u0, int64_t u1, Checkpointing ckpt) {
  using K = UnitStep::Kind;
  constexpr UnitUse V = UnitUse::Values, G = UnitUse::Grads, VG = UnitUse::ValuesGrads;
  const int64_t n = c.num_hidden_layers, head = n + 1;
  TITAN_ASSERT(0 <= u0 && u0 < u1 && u1 <= n + 2, "stage_schedule: units [", u0, ", ", u1, ")");
  std::vector<UnitStep> s;
  auto need = [&](int64_t u, UnitUse use) { s.push_back({K::Need, u, use}); };
  auto done = [&](int64_t u, UnitUse use) { s.push_back({K::Done, u, use}); };
  auto prefetch = [&](int64_t u) { s.push_back({K::Prefetch, u}); };
  auto run = [&](int64_t u, Phase p) { s.push_back({K::Run, u, UnitUse::None, p}); };
  const int64_t fwd_end = std::min(u1, head);  // the units with a forward step
  if (!backward) {
    for (int64_t u = u0; u < fwd_end; ++u) {
      need(u, V);
      if (u + 1 < fwd_end) prefetch(u + 1);
      run(u, Phase::Forward);
      done(u, V);
    }
    return s;
  }
  const int64_t lo = std::max<int64_t>(u0, 1);  // the stage's first layer unit
  if (u1 == n + 2) {
    need(head, VG);
    if (c.tie_word_embeddings) need(0, VG);
    if (fwd_end - 1 >= lo) prefetch(fwd_end - 1);
    run(head, Phase::Backward);
    if (c.tie_word_embeddings && u0 > 0) done(0, VG);  // the last stage's tied copy
    else if (c.tie_word_embeddings) done(0, V);        // one stage holds everything: as the whole pass
    done(head, VG);
  }
  for (int64_t u = fwd_end - 1; u >= lo; --u) {
    need(u, VG);
    if (u > lo) prefetch(u - 1);
    if (ckpt != Checkpointing::None) run(u, Phase::Recompute);
    run(u, Phase::Backward);
    done(u, VG);
  }
  if (u0 == 0) {
    need(0, G);
    run(0, Phase::Backward);
    done(0, G);
  }
  return s;
}

}  // namespace titan
