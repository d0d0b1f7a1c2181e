#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include <unistd.h>

#include "cli/command.h"
#include "core/error.h"
#include "core/threading.h"
#include "util/numbers.h"
#include "util/strings.h"

namespace titan::cli {

std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> c;
  return c;
}

Args::Args(const std::vector<std::string>& args, const std::vector<std::string>& flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) == 0 && a.size() > 2) {
      std::string key = a.substr(2), val;
      size_t eq = key.find('=');
      bool is_flag = false;
      for (auto& f : flags) is_flag |= (f == key);
      if (eq != std::string::npos) {
        val = key.substr(eq + 1);
        key = key.substr(0, eq);
      } else if (!is_flag) {
        TITAN_CHECK(i + 1 < args.size(), "option --", key, " needs a value");
        val = args[++i];
      } else {
        val = "1";
      }
      opts_[key] = val;
    } else {
      positional_.push_back(a);
    }
  }
}

bool Args::has(const std::string& key) const { return opts_.count(key) != 0; }

std::string Args::get(const std::string& key, const std::string& def) const {
  auto it = opts_.find(key);
  return it == opts_.end() ? def : it->second;
}

std::string Args::require(const std::string& key) const {
  TITAN_CHECK(has(key), "missing required option --", key);
  return get(key);
}

int64_t Args::get_int(const std::string& key, int64_t def, int64_t min, int64_t max) const {
  return has(key) ? parse_int(get(key), "--" + key, min, max) : def;
}

uint64_t Args::get_uint64(const std::string& key, uint64_t def, uint64_t min, uint64_t max) const {
  return has(key) ? parse_uint64(get(key), "--" + key, min, max) : def;
}

double Args::get_double(const std::string& key, double def, double min, double max) const {
  return has(key) ? parse_double(get(key), "--" + key, min, max) : def;
}

void Args::check_known(const std::vector<std::string>& known) const {
  for (auto& [k, v] : opts_) {
    bool ok = false;
    for (auto& n : known) ok |= (n == k);
    if (!ok) {
      std::string hint = closest_match(k, known);
      fail("unknown option --", k, hint.empty() ? "" : " (did you mean --" + hint + "?)");
    }
  }
}

}  // namespace titan::cli

static void usage() {
  std::fprintf(stderr, "usage: titan <command> [options]\n\ncommands:\n");
  for (auto& [name, c] : titan::cli::commands()) std::fprintf(stderr, "  %-10s %s\n", name.c_str(), c.summary);
}

namespace {

// titan generate / chat: OpenMP's worker threads wait passively (they sleep as soon as a parallel
// region ends) unless the user chose a policy (OMP_WAIT_POLICY or GOMP_SPINCOUNT). The decode
// step's many short regions do not run on OpenMP: they run on the decode team (core/team.h),
// which spins, then yields, then sleeps, and so is fast on an idle machine and fair on a busy
// one. What stays on OpenMP (the prefill's GEMMs) has long regions, where a wake-up costs little;
// spinning OpenMP workers would instead take the cores from the team after every prefill, and
// on a machine shared with other processes from the thread that has the work (measured on a
// loaded 2-core machine before the team: decode 17-35x slower with OpenMP's default than with
// passive). The OpenMP runtime reads its settings once, when it is loaded, so the process sets
// the variable and executes itself again (same pid, arguments and environment otherwise).
// Training keeps the default: its regions are long and nothing else waits for the cores.
void passive_openmp_for_inference(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "generate") != 0 && std::strcmp(argv[1], "chat") != 0)) return;
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then run on with the default policy
  unsetenv("OMP_WAIT_POLICY");
}

}  // namespace

int main(int argc, char** argv) {
  passive_openmp_for_inference(argc, argv);
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage();
    return argc < 2 ? 2 : 0;
  }
  auto& cmds = titan::cli::commands();
  auto it = cmds.find(argv[1]);
  if (it == cmds.end()) {
    std::fprintf(stderr, "titan: unknown command '%s'\n", argv[1]);
    usage();
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  // --help / -h anywhere: the command's (or its action's) usage on stdout, status 0.
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      const std::string action = !args.empty() && args[0][0] != '-' ? args[0] : "";
      std::string text = titan::cli::command_help(argv[1], action);
      if (text.empty()) text = std::string("usage: titan ") + argv[1] + " [options]\n" + it->second.summary + "\n";
      std::fputs(text.c_str(), stdout);
      return 0;
    }
  try {
    if (const char* t = std::getenv("TITAN_NUM_THREADS"); t && *t)
      titan::set_num_threads(int(titan::parse_int(t, "TITAN_NUM_THREADS", 0, titan::max_num_threads())));
    return it->second.fn(args);
  } catch (const titan::Error& e) {
    std::fprintf(stderr, "titan %s: error: %s\n", argv[1], e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "titan %s: error: %s\n", argv[1], e.what());
    return 1;
  }
}
