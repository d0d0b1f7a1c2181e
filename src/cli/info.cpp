// titan info: parameter count, training FLOPs per token and training-state memory of a model
// given as an HF folder or a built-in flavor name.
#include <sys/stat.h>

#include <cstdio>

#include "cli/command.h"
#include "core/allocator.h"
#include "model/flops.h"
#include "train/trainer.h"

namespace titan::cli {

static int print_info(const std::string& m, const ModelConfig& cfg, int64_t seq, bool json) {
  ModelSize s = model_size(cfg, seq);
  const double gib = double(1ull << 30);
  const double state = double(s.param_bytes() + s.grad_bytes() + s.optimizer_bytes());
  if (json) {
    std::printf(
        "{\"model\": \"%s\", \"params\": %lld, \"active_params\": %lld, \"embedding_params\": %lld, "
        "\"flops_per_token\": %.6g, \"seq_len\": %lld, \"param_bytes\": %lld, \"grad_bytes\": %lld, "
        "\"optimizer_bytes\": %lld}\n",
        m.c_str(), (long long)s.params, (long long)s.active_params, (long long)s.embedding_params, s.flops_per_token,
        (long long)seq,
        (long long)s.param_bytes(), (long long)s.grad_bytes(), (long long)s.optimizer_bytes());
    return 0;
  }
  std::printf("model            %s (%s, %lld layers, hidden %lld, heads %lld/%lld, head_dim %lld, ffn %lld, vocab %lld%s)\n",
              m.c_str(), cfg.model_type.c_str(), (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size,
              (long long)cfg.num_attention_heads, (long long)cfg.num_key_value_heads, (long long)cfg.head_dim,
              (long long)cfg.intermediate_size, (long long)cfg.vocab_size, cfg.tie_word_embeddings ? ", tied" : "");
  std::printf("parameters       %lld (%.3f B), embedding %lld\n", (long long)s.params, double(s.params) / 1e9,
              (long long)s.embedding_params);
  if (cfg.is_moe()) {
    std::printf("experts          %lld per sparse layer (%lld of %lld layers sparse), top-%lld, moe_ffn %lld\n",
                (long long)cfg.num_experts, (long long)cfg.num_sparse_layers(), (long long)cfg.num_hidden_layers,
                (long long)cfg.num_experts_per_tok, (long long)cfg.moe_intermediate_size);
    std::printf("active params    %lld (%.3f B) per token\n", (long long)s.active_params, double(s.active_params) / 1e9);
  }
  std::printf("flops/token      %.4g (training, seq_len %lld%s)\n", s.flops_per_token, (long long)seq,
              cfg.is_moe() ? ", active parameters only" : "");
  std::printf("weights f32      %.2f GiB\n", double(s.param_bytes()) / gib);
  std::printf("grads f32        %.2f GiB\n", double(s.grad_bytes()) / gib);
  std::printf("adamw states     %.2f GiB\n", double(s.optimizer_bytes()) / gib);
  std::printf("training state   %.2f GiB (%.0f%% of this machine's %.1f GiB), activations extra\n", state / gib,
              100.0 * state / double(machine_memory_bytes()), double(machine_memory_bytes()) / gib);
  // The guide's reference machine has 24 GiB; say plainly when the state alone cannot fit.
  if (state > 24.0 * gib)
    std::printf("fits             NO: %.2f GiB of f32 training state exceeds a 24 GiB machine%s\n", state / gib,
                state > double(machine_memory_bytes()) ? " and this one" : "");
  return 0;
}

// `titan info --config JOB.toml [--section.key value ...]`: the model a training job would build
// (flavor or config.json plus the [model] n_layers / num_experts / top_k overrides), at the job's
// seq_len. Nothing is allocated, so a model too large for this machine can be sized here.
static int info_for_job(const std::vector<std::string>& argv, bool json) {
  JobConfig job = parse_job_command_line(argv);
  ModelConfig cfg = job_model_config(job);
  std::string name = cfg.flavor.empty() ? "config.json" : cfg.flavor;
  if (job.model.n_layers > 0 || job.model.num_experts > 0 || job.model.top_k > 0) name += " (overridden by the job)";
  return print_info(name, cfg, job.training.seq_len, json);
}

static int cmd_info(const std::vector<std::string>& argv) {
  for (const auto& a : argv)
    if (a == "--config" || a.rfind("--config=", 0) == 0) {
      std::vector<std::string> rest;  // the job command line without --json
      bool json = false;
      for (const auto& b : argv) {
        if (b == "--json")
          json = true;
        else
          rest.push_back(b);
      }
      return info_for_job(rest, json);
    }
  Args args(argv, {"json"});
  args.check_known({"model", "seq-len", "json"});
  const std::string m = args.require("model");
  struct stat st {};
  ModelConfig cfg = (::stat(m.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ? load_hf_config(m + "/config.json")
                                                                          : flavor_config(m);
  const int64_t seq = std::stoll(args.get("seq-len", "2048"));
  return print_info(m, cfg, seq, args.has("json"));
}

TITAN_COMMAND("info", "parameters, FLOPs per token and memory of a model folder or flavor", cmd_info);

}  // namespace titan::cli
