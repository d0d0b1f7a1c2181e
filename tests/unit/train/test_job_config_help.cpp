// The job config's field table as documentation: every key has a type, a default and a one-line
// doc, `titan train --help-config` lists every key the parsers accept, and the allowed values it
// lists for a key are exactly the values the parsers accept.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/error.h"
#include "train/job_config.h"
#include "unit/train/checkpoint_test_util.h"
#include "util/strings.h"

using namespace titan;
using titan::test::error_of;

namespace {

// "section.key" of every key line under a "[section]" header of `text` (lines "  key = ..." in the
// help, "key = ..." or "# key unset" in rendered TOML).
std::set<std::string> keys_listed(const std::string& text, bool help) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.size() > 2 && line.front() == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    if (section.empty()) continue;
    if (help && line.rfind("      ", 0) == 0) continue;  // a doc line
    if (help && line.rfind("  ", 0) != 0) continue;
    std::string body = trim(line);
    if (body.rfind("# ", 0) == 0 && body.size() > 8 && body.ends_with(" unset")) body = body.substr(2, body.size() - 8);
    const size_t eq = body.find(" = ");
    if (eq != std::string::npos) body = body.substr(0, eq);
    if (!body.empty()) out.insert(section + "." + body);
  }
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

TEST(JobConfigHelp, EveryKeyHasATypeADefaultAndAOneLineDoc) {
  const auto info = job_config_key_info();
  const auto keys = job_config_keys();
  ASSERT_EQ(info.size(), keys.size());
  for (size_t i = 0; i < info.size(); ++i) {
    const auto& k = info[i];
    const std::string name = k.section + "." + k.key;
    EXPECT_EQ(name, keys[i]);
    EXPECT_FALSE(k.type.empty()) << name;
    EXPECT_FALSE(k.default_value.empty()) << name;
    EXPECT_GE(k.doc.size(), 10u) << name << ": no doc";
    EXPECT_EQ(k.doc.find('\n'), std::string::npos) << name << ": the doc is one line";
    EXPECT_LE(k.doc.size(), 110u) << name << ": the doc is one short line";
  }
}

TEST(JobConfigHelp, ListsEveryKeyTheParsersAccept) {
  const std::string help = job_config_help();
  const std::set<std::string> listed = keys_listed(help, true);
  // Every key of the field table, and every key render_toml writes (what a job file may hold).
  const auto keys = job_config_keys();
  EXPECT_EQ(listed, std::set<std::string>(keys.begin(), keys.end()));
  EXPECT_EQ(keys_listed(render_toml(JobConfig{}), false), listed);
  // Every listed key is one the override parser takes, with its listed default as the value.
  for (const auto& k : job_config_key_info()) {
    std::string v = k.default_value;
    if (v == "unset") v = "none";
    else if (k.type == "string" && v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
    JobConfig c;
    EXPECT_EQ(error_of([&] { apply_override(c, k.section + "." + k.key, v); }), "") << k.section << "." << k.key;
    EXPECT_EQ(render_toml(c), render_toml(JobConfig{})) << k.section << "." << k.key << " = " << v;
  }
  // A key the help does not list is refused.
  JobConfig c;
  EXPECT_NE(error_of([&] { apply_override(c, "training.not_a_key", "1"); }), "");
  // Each section once, in render order, each key with its doc under it.
  EXPECT_NE(help.find("\n[training]\n"), std::string::npos);
  EXPECT_NE(help.find("  seq_len = 2048  (integer)\n      tokens per sequence"), std::string::npos) << help;
  EXPECT_NE(help.find("  decay_ratio = unset  (number, optional)\n"), std::string::npos) << help;
  EXPECT_NE(help.find("  mixed_precision_param = \"float32\"  (one of: float32, bfloat16)\n"), std::string::npos);
  EXPECT_NE(help.find("  flavor = \"debugmodel\"  (string; known: "), std::string::npos);
}

TEST(JobConfigHelp, AllowedValuesAreExactlyWhatTheParsersAccept) {
  int enums = 0;
  for (const auto& k : job_config_key_info()) {
    if (k.allowed.empty()) continue;
    ++enums;
    const std::string dotted = k.section + "." + k.key;
    for (const auto& v : k.allowed) {
      JobConfig a, b;
      EXPECT_EQ(error_of([&] { apply_override(a, dotted, v); }), "") << dotted << " = " << v;
      apply_toml(b, "[" + k.section + "]\n" + k.key + " = \"" + v + "\"\n", "t.toml");
      EXPECT_EQ(render_toml(a), render_toml(b));
      EXPECT_NE(render_toml(a).find("\n" + k.key + " = \"" + v + "\"\n"), std::string::npos) << dotted;
      EXPECT_NO_THROW(a.validate("t.toml"));
    }
    JobConfig c;
    const std::string e = error_of([&] { apply_override(c, dotted, "no-such-value"); });
    EXPECT_NE(e.find("is not one of: " + join(k.allowed)), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_EQ(enums, 13);  // model/optimizer name, decay_type, mixed precision, reshard, export dtype,
                         // checkpointing, attn_mask_type, dataset_format, dataset_streaming, [lora] base_dtype,
                         // context_parallel_load_balancer, [compute] device
  // A subset of an enum: f16 is an export dtype, not a mixed-precision dtype.
  JobConfig c;
  EXPECT_NE(error_of([&] { apply_override(c, "training.mixed_precision_param", "float16"); })
                .find("is not one of: float32, bfloat16"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { apply_override(c, "checkpoint.export_dtype", "float16"); }), "");
  EXPECT_EQ(c.checkpoint.export_dtype, DType::F16);
  // A value set in code that the key does not allow is named by validate().
  c.training.mixed_precision_param = DType::F16;
  EXPECT_EQ(error_of([&] { c.validate("x"); }),
            "x: [training] mixed_precision_param = \"float16\" is not one of: float32, bfloat16");
}

TEST(JobConfigHelp, TitanTrainHelpConfigPrintsIt) {
  namespace fs = std::filesystem;
  const std::string out = (fs::temp_directory_path() / ("titan_help_" + std::to_string(::getpid()))).string();
  const std::string cmd = std::string(TITAN_BIN) + " train --help-config > " + out + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(out);
  EXPECT_EQ(read_file(out), job_config_help());
  fs::remove(out);
}
