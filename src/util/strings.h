// Small string helpers shared across the project.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace titan {

size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `s` by edit distance, or "" when none is plausibly meant.
std::string closest_match(std::string_view s, const std::vector<std::string>& candidates);
std::vector<std::string> split(std::string_view s, char sep);
std::string trim(std::string_view s);
// `s` with ASCII letters in lower case (other bytes, UTF-8 included, unchanged).
std::string ascii_lower(std::string_view s);
// Bytes of a whole file; the error names the file and the reason. A folder, a device or a socket
// is refused ("<path>: is a directory"); a named pipe is read to its end.
std::string read_file(const std::string& path);
// Why a file of this st_mode cannot be read as a file ("is a directory", ...), or nullptr.
const char* not_a_file_reason(unsigned mode);
// Refuses, before anything opens it, a path that exists and is not a regular file (after
// symlinks): a named pipe would block open() for ever, a folder or device read as something else
// ("<path>: is not a regular file (a named pipe)"). A missing path passes (open names it).
void check_regular_file(const std::string& path);
// Whether `path` is a regular file (after symlinks).
bool is_regular_file(const std::string& path);
// read_file of a file that must be a regular one (a model folder's, a dataset's, a tokenizer's).
std::string read_regular_file(const std::string& path);
// Atomic write: temporary file in the same folder, fsync, rename over `path`, fsync the folder.
void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace titan
