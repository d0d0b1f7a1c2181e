// titan score: the mean next-token loss of an HF checkpoint on token id sequences, optionally with
// the full logits and the parameter gradients written as safetensors (for checking against HF).
#include <cmath>
#include <cstdio>

#include "cli/command.h"
#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/hf_model.h"
#include "model/base_fingerprint.h"
#include "model/peft_adapter.h"

namespace titan::cli {

// Index of the first element of an f32 tensor that is NaN or infinite, or -1.
static int64_t first_non_finite(const Tensor& t) {
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}

static const char* float_name(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

static int cmd_score(const std::vector<std::string>& argv) {
  Args args(argv, {"json", "allow-other-base"});
  args.check_known({"model", "adapter", "tokens", "dump-logits", "dump-grads", "json", "kernels", "compute",
                    "allow-other-base"});
  const std::string kernels = args.get("kernels", default_variant());
  const std::string model_dir = args.require("model");
  auto model = load_hf_model(model_dir, kernels);
  if (args.has("adapter")) {  // LoRA on the base, not merged; only on the base it was trained on
    check_base_fingerprint(args.get("adapter"), adapter_base_fingerprint(args.get("adapter")), model_dir,
                           args.has("allow-other-base"), "--allow-other-base");
    load_peft_adapter(*model, args.get("adapter"));
  }
  // A NaN or infinite weight makes every loss NaN; name it instead (one pass over the weights,
  // small next to a forward).
  for (const auto& p : model->params().all()) {
    const int64_t i = first_non_finite(p.value);
    TITAN_CHECK(i < 0, model_dir, ": tensor ", p.name, " is not finite (element ", i, " is ",
                float_name(p.value.data<float>()[i]), ")");
  }
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
  TITAN_CHECK(std::isfinite(loss), "the loss is ", float_name(loss), " on ", args.get("tokens"),
              " although every weight of ", model_dir, " is finite (the forward pass overflowed)");
  if (args.has("json"))
    std::printf("{\"loss\": %.9g, \"tokens\": %lld}\n", loss, static_cast<long long>(count));
  else
    std::printf("loss: %.9g\n", loss);
  return 0;
}

TITAN_COMMAND("score", "mean next-token loss of an HF checkpoint on token sequences", cmd_score);

}  // namespace titan::cli
