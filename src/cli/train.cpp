// titan train: the training entry point. `--config FILE` (or --job.config_file) plus
// `--section.key value` overrides; see recipes/ and src/train/job_config.h.
#include "cli/command.h"
#include "train/trainer.h"

namespace titan::cli {

static int cmd_train(const std::vector<std::string>& args) {
  JobConfig cfg = parse_job_command_line(args);
  // A run stopped by SIGINT/SIGTERM has checkpointed and exits cleanly (status 0).
  run_training(cfg);
  return 0;
}

TITAN_COMMAND("train", "train or fine-tune a model (TOML job file + --section.key overrides)", cmd_train);

}  // namespace titan::cli
