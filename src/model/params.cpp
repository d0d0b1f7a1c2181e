#include "model/params.h"

namespace titan {

Param& ParamStore::add(const std::string& name, Tensor value, Tensor grad) {
  TITAN_ASSERT(find(name) == nullptr, "duplicate parameter ", name);
  params_.push_back(Param{name, std::move(value), std::move(grad)});
  return params_.back();
}

Param* ParamStore::find(const std::string& name) {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

const Param* ParamStore::find(const std::string& name) const {
  for (auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

Param& ParamStore::at(const std::string& name) {
  Param* p = find(name);
  TITAN_CHECK(p != nullptr, "no parameter named ", name);
  return *p;
}

int64_t ParamStore::numel() const {
  int64_t n = 0;
  for (auto& p : params_) n += p.value.numel();
  return n;
}

void ParamStore::zero_grad() {
  for (auto& p : params_)
    if (p.grad.defined()) p.grad.zero_();  // undefined: a frozen parameter
}

}  // namespace titan
