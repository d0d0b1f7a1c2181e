#include "cli/verify.h"

#include <cstdio>

#include "core/error.h"

namespace titan::cli {

std::map<std::string, Command>& verify_commands() {
  static std::map<std::string, Command> c;
  return c;
}

static int cmd_verify(const std::vector<std::string>& args) {
  auto& cmds = verify_commands();
  if (args.empty() || !cmds.count(args[0])) {
    std::string known;
    for (auto& [n, c] : cmds) known += "\n  " + n + "  " + c.summary;
    fail(args.empty() ? std::string("missing what to verify") : "unknown check '" + args[0] + "'",
         "; usage: titan verify <check> ...", known);
  }
  return cmds[args[0]].fn(std::vector<std::string>(args.begin() + 1, args.end()));
}

TITAN_COMMAND("verify", "numerical self-checks: checkpoint round trips, kernels against references", cmd_verify);

}  // namespace titan::cli
