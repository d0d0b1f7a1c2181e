// titan train: the training entry point. `--config FILE` (or --job.config_file) plus
// `--section.key value` overrides; see recipes/ and src/train/job_config.h. `--help-config` lists
// every section and key (type, default, allowed values, doc) and exits.
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "distributed/backends.h"
#include "train/trainer.h"

namespace titan::cli {

static int cmd_train(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help-config") {
      std::fputs(job_config_help().c_str(), stdout);
      return 0;
    }
  // Under mpirun (or TITAN_COMM=mpi) every rank runs this; alone, one process (LocalComm).
  std::unique_ptr<comm::Comm> comm = distributed::make_comm();
  try {
    JobConfig cfg = parse_job_command_line(args);
    // A run stopped by SIGINT/SIGTERM has checkpointed and exits cleanly (status 0).
    run_training(cfg, *comm);
  } catch (const std::exception& e) {
    if (comm->size() == 1) throw;
    // One rank's error ends the whole job (MPI_Abort) instead of leaving the others waiting in
    // a collective.
    std::fprintf(stderr, "titan: error (rank %d of %d): %s\n", comm->rank(), comm->size(), e.what());
    comm->abort(1);
  }
  return 0;
}

TITAN_COMMAND("train", "train or fine-tune a model (TOML job file + --section.key overrides)", cmd_train);

}  // namespace titan::cli
