// titan verify kernels [--op NAME] [--device cpu|cuda] [--json]: every registered kernel variant against its op's
// reference, forward and backward, f32 and bf16, on a fixed list of shapes (src/ops/verify/).
// --device cuda: only the "cuda" variants (single-source CUDA kernels; under the grid emulator in
// a build without a GPU, docs/cuda.md), and the ops that have none named on stderr.
// Prints a table (or one JSON array) and exits 1 when any row fails.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/verify.h"
#include "ops/catalog.h"
#include "ops/registry.h"
#include "ops/verify/verify.h"

namespace titan::cli {

static int cmd_verify_kernels(const std::vector<std::string>& argv) {
  Args args(argv, {"json"});
  args.check_known({"op", "json", "device"});
  TITAN_CHECK(args.positional().empty(), "usage: titan verify kernels [--op NAME] [--device cpu|cuda] [--json]");
  const std::string cpu = device_type_name(DeviceType::CPU), cuda = device_type_name(DeviceType::CUDA);
  const std::string device = args.get("device", cpu);
  TITAN_CHECK(device == cpu || device == cuda, "verify kernels: --device must be cpu or cuda, got '", device, "'");
  const std::string cuda_variant = default_variant(DeviceType::CUDA);
  const std::vector<VerifyRow> rows = verify_kernels(args.get("op", ""), device == cuda ? cuda_variant : "");
  if (device == cuda) {
    std::string missing;
    for (const auto& op : op_names())
      if ((args.get("op", "").empty() || op == args.get("op", "")) && !op_has_variant(op, cuda_variant))
        missing += (missing.empty() ? "" : ", ") + op;
    if (!missing.empty()) std::fprintf(stderr, "verify kernels: no cuda variant yet: %s\n", missing.c_str());
  }
  size_t failed = 0;
  for (const auto& r : rows) failed += r.ok ? 0 : 1;
  if (args.has("json")) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : rows)
      arr.push_back({{"op", r.op},
                     {"variant", r.variant},
                     {"dtype", r.dtype},
                     {"shape", r.shape},
                     {"direction", r.direction},
                     {"max_abs_diff", r.max_abs_diff},
                     {"max_rel_diff", r.max_rel_diff},
                     {"ok", r.ok}});
    std::printf("%s\n", arr.dump().c_str());
  } else {
    std::printf("%-13s %-13s %-5s %-40s %-9s %-12s %-12s %s\n", "op", "variant", "dtype", "shape", "direction",
                "max_abs_diff", "max_rel_diff", "ok");
    for (const auto& r : rows)
      std::printf("%-13s %-13s %-5s %-40s %-9s %-12.4g %-12.4g %s\n", r.op.c_str(), r.variant.c_str(), r.dtype.c_str(),
                  r.shape.c_str(), r.direction.c_str(), r.max_abs_diff, r.max_rel_diff,
                  r.ok ? (r.exact ? "ok (exact)" : "ok") : "FAIL");
    std::printf("%zu rows, %zu failed\n", rows.size(), failed);
  }
  return failed == 0 ? 0 : 1;
}

TITAN_VERIFY_COMMAND("kernels", "every kernel variant against its reference ([--op NAME] [--json])",
                     cmd_verify_kernels);

}  // namespace titan::cli
