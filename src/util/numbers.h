// Numbers typed by a user (command-line options, environment variables, folder names such as
// step-N): the whole text must be the number, in decimal, with no spaces, no '+' and, for unsigned
// values, no '-' (so "-1" is never read as 2^64 - 1). Errors name `what` (the option or variable),
// the text as given and the allowed range, on one line.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace titan {

std::optional<int64_t> to_int64(std::string_view s);
std::optional<uint64_t> to_uint64(std::string_view s);
std::optional<double> to_double(std::string_view s);  // finite values only

int64_t parse_int(std::string_view text, std::string_view what, int64_t min, int64_t max);
uint64_t parse_uint64(std::string_view text, std::string_view what, uint64_t min, uint64_t max);
double parse_double(std::string_view text, std::string_view what, double min, double max);

}  // namespace titan
