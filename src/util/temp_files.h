// Temporary files removed when SIGINT or SIGTERM ends the process while they exist. A writer holds
// a TempFileGuard for as long as its temporary file may be on disk; the normal paths (rename into
// place, unlink on error) stay the writer's own.
//
// The handler is installed, once, for each of the two signals whose disposition is the default at
// the time: a signal that is ignored (a background job's SIGINT) or already handled (the trainer's
// stop handlers, installed later, save and restore this one) keeps its behaviour. The handler only
// unlinks the registered paths (unlink is async-signal-safe) and lets the signal end the process
// as it would have, with the same status.
#pragma once
#include <string>

namespace titan {

class TempFileGuard {
 public:
  explicit TempFileGuard(const std::string& path);
  ~TempFileGuard();
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;

 private:
  int slot_ = -1;  // -1: the path is too long or every slot is taken (then no removal on a signal)
};

}  // namespace titan
