// Parameter store: every trainable tensor under its Hugging Face name, with its gradient.
// Tensors that the engine computes with as one fused matrix (q/k/v projections, gate/up
// projections) are stored in one buffer and exposed here as row-slice views, so names, shapes and
// checkpoints are exactly HF's while the kernels see one large GEMM.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"

namespace titan {

struct Param {
  std::string name;
  Tensor value;  // f32
  Tensor grad;   // f32, same shape; accumulated by backward (undefined: frozen, no gradient)
};

class ParamStore {
 public:
  Param& add(const std::string& name, Tensor value, Tensor grad);
  Param* find(const std::string& name);
  const Param* find(const std::string& name) const;
  Param& at(const std::string& name);  // error names the parameter when missing
  std::vector<Param>& all() { return params_; }
  const std::vector<Param>& all() const { return params_; }
  int64_t numel() const;
  void zero_grad();

 private:
  std::vector<Param> params_;
};

}  // namespace titan
