// Which base a LoRA run trained on: a cheap fingerprint of an HF folder, recorded in the run's
// checkpoints ([lora] record in state.json) and in the adapter folders it writes
// (titan_base.json), and compared wherever adapters meet a base again (resume, export
// --merge-lora / --adapter, generate / score / eval / chat --adapter). A base whose weights
// were replaced by others of the same shapes (another fine-tune, another seed) gets another
// fingerprint, so adapters are never silently put on a model they were not trained for.
//
// FNV-1a-64 over: config.json (parsed and dumped again: formatting does not count), then for
// every tensor in name order its name, dtype, shape, byte size and 16 evenly spaced samples of
// 64 bytes of its data (16 pages per tensor are read, not the weights). Written as
// "fnv1a64:<16 hex digits>".
#pragma once
#include <string>

namespace titan {

std::string base_fingerprint(const std::string& hf_dir);

// The adapter folder's record (titan_base.json): written by save_peft_adapter, read here; "" when
// the folder has none (a PEFT folder from elsewhere).
constexpr const char* kAdapterBaseFile = "/titan_base.json";
std::string adapter_base_fingerprint(const std::string& adapter_dir);

// Throws "<what>: trained on a base with fingerprint A; <base> has fingerprint B (another model
// or other weights); pass <flag> to use it anyway" unless the two are equal, `recorded` is ""
// (nothing recorded) or `allow`.
void check_base_fingerprint(const std::string& what, const std::string& recorded, const std::string& base_dir,
                            bool allow, const std::string& flag);

}  // namespace titan
