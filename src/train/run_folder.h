// A run's folders, claimed and checked before any work (so that nothing is found wrong only at
// the first checkpoint, and two runs never write into one folder):
//
// RunLock: an exclusive flock(2) on <folder>/titan.lock, held while the object lives (`titan
// train`: for the whole run). The holder writes its pid into the file; a second run on the folder
// fails at once with "<folder> is in use by pid N". The kernel drops the lock when its process
// dies, so a lock file left by a killed run blocks nothing (its stale pid is overwritten). Under
// MPI only rank 0 takes it (prepare_run_folders): the lock belongs to the job.
//
// ensure_writable_folder: creates the folder (and parents) and proves it takes files by creating,
// writing and removing a probe file; errors name the folder and the reason (strerror).
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace titan {

struct JobConfig;
namespace comm {
class Comm;
}

class RunLock {
 public:
  explicit RunLock(const std::string& folder);  // creates the folder; throws when it is held
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// `what` names the folder's role in errors ("checkpoint folder").
void ensure_writable_folder(const std::string& folder, const std::string& what);

// Collective, before the model is built: rank 0 checks and locks [job] dump_folder and, with
// [checkpoint] enable, checks the checkpoint folder (and locks it too when it lies outside the
// dump folder); every rank throws rank 0's error, if any. The locks live as long as the result.
std::vector<std::unique_ptr<RunLock>> prepare_run_folders(const JobConfig& cfg, comm::Comm& comm);

}  // namespace titan
