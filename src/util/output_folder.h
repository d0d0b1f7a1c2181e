// An output folder written whole or not at all (import, export, adapter and merged folders):
// the writer fills a temporary sibling, <parent>/.<name>.titan-partial-<host>-<pid>, and commit()
// puts it in place with one rename (renameat2 RENAME_EXCHANGE when the folder exists, then the
// old one is removed), so that no kill, full disk or error between two files leaves a folder that
// loads as a mix of two models. Destroyed without commit(), the temporary is removed.
//
// A folder that exists and is not empty is refused unless `replace` is set (the commands' flag
// --replace): what it holds may be a user's. Every temporary carries a marker file
// (kOutputFolderMarker) naming its host and process; construction removes the temporaries beside
// the folder whose marker names this host and a process that no longer runs, and nothing else.
#pragma once
#include <string>

namespace titan {

constexpr const char* kOutputFolderMarker = ".titan-partial";

class OutputFolder {
 public:
  // `what` names the folder's role in errors ("import", "export"); `flag` the option that asks
  // for replacement ("--replace"; "" when the caller has none).
  OutputFolder(const std::string& dir, bool replace, const std::string& what, const std::string& flag = "--replace");
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  const std::string& path() const { return tmp_; }  // where to write now
  const std::string& final_path() const { return dir_; }
  bool committed() const { return committed_; }
  // Swaps the written folder into place (fsyncs its files' folder first); errors name the folder.
  void commit();

 private:
  std::string dir_, tmp_, what_;
  bool committed_ = false;
};

// The temporaries (marked as above) of dead processes of this host beside `dir`, removed; returns
// how many. Exposed for the tests.
int remove_stale_output_temporaries(const std::string& dir);

}  // namespace titan
