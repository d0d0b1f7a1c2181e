// The table of every job-config key (job_config_fields.cpp), internal to src/train: where the key
// lives in JobConfig, its type, allowed values, one-line doc and range checks, side by side.
// Parsing, rendering, validation and `titan train --help-config` (job_config.cpp) all read it;
// the default is whatever JobConfig's member initializer says (job_config.h).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "train/job_config.h"

namespace titan::job_fields {

enum class Kind { Int, Double, OptDouble, Bool, String, StringList, Enum, Mix };

// A check of one key's value on its own; cross-key checks stay in JobConfig::validate. The error
// reads "<origin>: [section] key <what>", or "<origin>: [section] key = <value> <what>" when
// names_value is set.
struct Check {
  Check(bool (*ok)(int64_t), std::string what, bool names_value = false)
      : on_int(ok), what(std::move(what)), names_value(names_value) {}
  Check(bool (*ok)(double), std::string what) : on_double(ok), what(std::move(what)) {}
  Check(bool (*ok)(const std::string&), std::string what) : on_text(ok), what(std::move(what)) {}
  bool (*on_int)(int64_t) = nullptr;               // Kind::Int
  bool (*on_double)(double) = nullptr;             // Kind::Double; Kind::OptDouble when set
  bool (*on_text)(const std::string&) = nullptr;  // Kind::String
  std::string what;
  bool names_value = false;
};

// One key, bound to one JobConfig instance (ptr points into it).
struct Field {
  const char* section = nullptr;
  const char* key = nullptr;
  Kind kind = Kind::Int;
  void* ptr = nullptr;
  const char* doc = nullptr;  // one line
  std::vector<Check> checks;
  // Kind::Enum: the allowed values (the enum's value as int, its spelling) and the access to it.
  std::vector<std::pair<int, const char*>> choices;
  int (*get_enum)(const void*) = nullptr;
  void (*set_enum)(void*, int) = nullptr;
  const char* (*enum_name)(int) = nullptr;  // the spelling of any value of the enum, allowed or not
  // A String key whose known values live elsewhere (model flavors, registry datasets): listed by
  // the help, checked where they are used.
  std::vector<std::string> (*known_values)() = nullptr;
};

// Every key of `c` in render order (sections in section_names() order).
std::vector<Field> fields_of(JobConfig& c);
const std::vector<std::string>& section_names();

}  // namespace titan::job_fields
