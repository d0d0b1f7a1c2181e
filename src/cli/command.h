// Subcommand registry for the `titan` executable: each src/cli/<name>.cpp registers itself.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace titan::cli {

using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;
  const char* summary;
  CommandFn fn;
};

std::map<std::string, Command>& commands();

// The usage text `titan <command> [<action>] --help` prints (cli/help.cpp): every option with its
// default and meaning; an action without its own text gets the command's; "" when none.
std::string command_help(const std::string& command, const std::string& action);

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* summary, CommandFn fn) { commands()[name] = Command{name, summary, fn}; }
};

// Minimal option parsing shared by subcommands: --key value or --key=value, and bare flags.
class Args {
 public:
  Args(const std::vector<std::string>& args, const std::vector<std::string>& flags_without_value);
  bool has(const std::string& key) const;
  std::string get(const std::string& key, const std::string& def = "") const;
  std::string require(const std::string& key) const;  // error names the missing option
  // Numeric options (util/numbers.h): the whole value must be the number and within [min, max];
  // an error names --key, the value as given and the range. Absent: def.
  int64_t get_int(const std::string& key, int64_t def, int64_t min, int64_t max) const;
  uint64_t get_uint64(const std::string& key, uint64_t def, uint64_t min, uint64_t max) const;
  double get_double(const std::string& key, double def, double min, double max) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Errors on any option not in `known` (with the closest suggestion).
  void check_known(const std::vector<std::string>& known) const;

 private:
  std::map<std::string, std::string> opts_;
  std::vector<std::string> positional_;
};

}  // namespace titan::cli

#define TITAN_COMMAND(name, summary, fn) \
  static ::titan::cli::CommandRegistrar titan_cmd_reg_##fn(name, summary, fn)
