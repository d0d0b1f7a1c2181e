// Subcommand registry for the `titan` executable: each src/cli/<name>.cpp registers itself.
#pragma once
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
