// The inference tests' fixtures (tools/oracle/generate_goldens.py): paths under fixtures/infer/
// and their JSON goldens, parsed once per process.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "util/strings.h"

namespace titan::test {

inline std::string infer_fixture(const std::string& rel) { return std::string(TITAN_FIXTURES) + "/infer/" + rel; }

// fixtures/infer/<name>, parsed on first use.
inline const nlohmann::json& infer_goldens(const std::string& name) {
  static std::map<std::string, nlohmann::json> parsed;
  auto it = parsed.find(name);
  if (it == parsed.end()) it = parsed.emplace(name, nlohmann::json::parse(read_file(infer_fixture(name)))).first;
  return it->second;
}

}  // namespace titan::test
