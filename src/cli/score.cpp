// titan score: the mean next-token loss of an HF checkpoint on token id sequences, optionally with
// the full logits and the parameter gradients written as safetensors (for checking against HF).
#include <cstdio>

#include "cli/command.h"
#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/hf_model.h"

namespace titan::cli {

static int cmd_score(const std::vector<std::string>& argv) {
  Args args(argv, {"json"});
  args.check_known({"model", "tokens", "dump-logits", "dump-grads", "json", "kernels", "compute"});
  const std::string kernels = args.get("kernels", "cpu");
  auto model = load_hf_model(args.require("model"), kernels);
  if (args.has("compute")) {
    DType c;
    TITAN_CHECK(parse_dtype(args.get("compute"), &c) && (c == DType::F32 || c == DType::BF16),
                "--compute must be f32 or bf16, got '", args.get("compute"), "'");
    model->set_compute_dtype(c);
  }
  Tensor ids = read_token_lines(args.require("tokens"));
  const int64_t B = ids.dim(0), S = ids.dim(1), V = model->config().vocab_size;
  for (int64_t i = 0; i < ids.numel(); ++i)
    TITAN_CHECK(ids.data<int64_t>()[i] < V, args.get("tokens"), ": token id ", ids.data<int64_t>()[i],
                " is not below the model's vocab_size ", V);
  Tensor labels = next_token_labels(ids);
  const int64_t count = count_labels(labels);

  double loss_sum = 0;
  if (args.has("dump-logits")) {
    Tensor logits = Tensor::empty({B * S, V}, DType::F32);
    loss_sum = model->forward(ids, labels, &logits);
    save_safetensors(args.get("dump-logits"), {{"logits", logits.view({B, S, V})}});
  } else if (!args.has("dump-grads")) {
    loss_sum = model->forward(ids, labels);
  }
  if (args.has("dump-grads")) {
    model->params().zero_grad();
    loss_sum = model->forward_backward(ids, labels, float(1.0 / double(count)));
    std::vector<NamedTensor> grads;
    for (auto& p : model->params().all()) grads.push_back({p.name, p.grad});
    save_safetensors(args.get("dump-grads"), grads);
  }
  const double loss = loss_sum / double(count);
  if (args.has("json"))
    std::printf("{\"loss\": %.9g, \"tokens\": %lld}\n", loss, static_cast<long long>(count));
  else
    std::printf("loss: %.9g\n", loss);
  return 0;
}

TITAN_COMMAND("score", "mean next-token loss of an HF checkpoint on token sequences", cmd_score);

}  // namespace titan::cli
