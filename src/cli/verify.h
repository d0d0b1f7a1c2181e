// `titan verify <what>`: numerical self-checks. Each check registers a sub-command here
// (checkpoint: load/export/reload round trip; kernels: every kernel variant against its reference).
#pragma once
#include <map>
#include <string>

#include "cli/command.h"

namespace titan::cli {

std::map<std::string, Command>& verify_commands();

struct VerifyRegistrar {
  VerifyRegistrar(const char* name, const char* summary, CommandFn fn) { verify_commands()[name] = Command{name, summary, fn}; }
};

}  // namespace titan::cli

#define TITAN_VERIFY_COMMAND(name, summary, fn) \
  static ::titan::cli::VerifyRegistrar titan_verify_reg_##fn(name, summary, fn)
