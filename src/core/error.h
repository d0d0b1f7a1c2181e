// Errors: every failure the user can cause is a titan::Error carrying one line that names the
// file (or option) and the reason. Internal invariants use TITAN_ASSERT (file:line in the text).
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace titan {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... A>
[[noreturn]] void fail(A&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<A>(parts));
  throw Error(os.str());
}

}  // namespace titan

// User-facing check: message parts are streamed together into one line.
#define TITAN_CHECK(cond, ...)                 \
  do {                                         \
    if (!(cond)) ::titan::fail(__VA_ARGS__);   \
  } while (0)

// Internal invariant: a failure here is a bug in titan, so the location is part of the message.
#define TITAN_ASSERT(cond, ...)                                                              \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::titan::fail("internal error at ", __FILE__, ":", __LINE__, ": ", #cond " " __VA_OPT__(, ) \
                    __VA_ARGS__);                                                            \
  } while (0)
