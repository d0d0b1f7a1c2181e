// The kernel case table (src/ops/verify/), one test per case and variant: every non-reference
// variant against the reference on the case's inputs, and for the cases with a finite-difference
// check, the reference backward against central differences (variant "reference"). `titan verify
// kernels` runs the same table; a case added there is a test here.
#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <string>
#include <vector>

#include "ops/verify/verify.h"

using namespace titan;
using namespace titan::verify_detail;

namespace {

struct CaseRun {
  size_t index;
  std::string variant;
};

void PrintTo(const CaseRun& r, std::ostream* os) {
  const KernelCase& c = kernel_cases()[r.index];
  *os << c.op << "." << r.variant << " " << c.dtype() << " " << c.shape;
}

std::vector<CaseRun> all_runs() {
  std::vector<CaseRun> runs;
  const auto& table = kernel_cases();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].fd) runs.push_back({i, "reference"});
    for (const auto& v : table[i].variants()) runs.push_back({i, v});
  }
  return runs;
}

std::string test_name(const ::testing::TestParamInfo<CaseRun>& info) {
  const KernelCase& c = kernel_cases()[info.param.index];
  std::string n = c.op + "_" + info.param.variant + "_" + c.dtype() + "_" + std::to_string(info.param.index);
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

class KernelCases : public ::testing::TestWithParam<CaseRun> {};

TEST_P(KernelCases, AgreeWithTheReference) {
  const KernelCase& c = kernel_cases()[GetParam().index];
  const auto rows = run_case(c, GetParam().variant);
  ASSERT_FALSE(rows.empty()) << c.op << " " << c.shape;
  for (const auto& r : rows)
    EXPECT_TRUE(r.ok) << r.op << "." << r.variant << " " << r.dtype << " " << r.shape << " " << r.direction << ": "
                      << r.why << " (max_abs_diff " << r.max_abs_diff << ", max_rel_diff " << r.max_rel_diff << ", tol "
                      << r.tol << ")";
}

INSTANTIATE_TEST_SUITE_P(Table, KernelCases, ::testing::ValuesIn(all_runs()), test_name);

}  // namespace
