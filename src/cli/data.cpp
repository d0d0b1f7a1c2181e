// titan data make-arithmetic --output DIR [--max-operand 99] [--valid 200] [--train -1] [--seed 0]:
// the generated chat dataset of the SFT demonstration (data/arithmetic.h), train.jsonl and
// valid.jsonl in DIR.
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "data/arithmetic.h"

namespace titan::cli {

namespace {

int cmd_data(const std::vector<std::string>& argv) {
  Args args(argv, {"replace"});
  args.check_known({"output", "max-operand", "valid", "train", "seed", "replace"});
  const auto& pos = args.positional();
  const std::string usage =
      "usage: titan data make-arithmetic --output DIR [--max-operand 99] [--valid 200] [--train -1] [--seed 0] [--replace]";
  TITAN_CHECK(pos.size() == 1 && pos[0] == "make-arithmetic",
              pos.empty() ? "missing action; " + usage : "unknown data action '" + pos[0] + "'; " + usage);
  data::ArithmeticOptions o;
  o.max_operand = args.get_int("max-operand", o.max_operand, 0, 9999);
  o.valid = args.get_int("valid", o.valid, 0, int64_t(1) << 30);
  o.train = args.get_int("train", o.train, -1, int64_t(1) << 30);
  o.seed = args.get_uint64("seed", o.seed, 0, UINT64_MAX);
  const std::string dir = args.require("output");
  data::write_arithmetic(dir, o, args.has("replace"));
  const data::ArithmeticSplit s = data::arithmetic_split(o);
  std::printf("wrote %s/train.jsonl (%zu questions) and %s/valid.jsonl (%zu held out)\n", dir.c_str(), s.train.size(),
              dir.c_str(), s.valid.size());
  return 0;
}

}  // namespace

TITAN_COMMAND("data", "generated datasets: make-arithmetic (the SFT demonstration's questions)", cmd_data);

}  // namespace titan::cli
