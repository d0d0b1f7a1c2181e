// Memory hooks around the parameter units (model/unit_schedule.h has the units, the steps of a
// pass and their order). With hooks installed the model (DecoderModel::set_unit_hooks) asks for a
// unit's memory right before it reads it and says when it is done, so the hooks can keep
// parameters and gradients sharded in between (distributed/fsdp.h): need / done / prefetch are the
// schedule's Need / Done / Prefetch steps, end_pass() ends every forward(_backward) call.
// Its own header so that whoever implements the hooks does not pull in the whole model.
#pragma once
#include <cstdint>

#include "model/unit_schedule.h"

namespace titan {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void need(int64_t unit, UnitUse use) = 0;
  virtual void done(int64_t unit, UnitUse use) = 0;
  virtual void prefetch(int64_t) {}
  virtual void end_pass() {}
};

}  // namespace titan
