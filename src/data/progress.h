// A progress bar on stderr for long jobs: fraction done, rate and ETA. On a terminal it redraws
// one line at most 10 times a second; otherwise it prints a plain line every 10 seconds. Jobs that
// end within 2 seconds print only the summary line (or nothing when quiet).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace titan::data {

class Progress {
 public:
  // `total`: units of work; `unit`: their name: "B" (bytes, shown as kB, MB...) or any other
  // word, shown with counts ("windows": 1.20k windows/s).
  Progress(std::string label, uint64_t total, bool enabled = true, std::string unit = "B");
  // done: units finished so far; extra: free text appended (for example a token count).
  void update(uint64_t done, const std::string& extra = "");
  // Final line with totals; called by the destructor when not called before.
  void finish(const std::string& summary);
  ~Progress();

 private:
  void draw(uint64_t done, const std::string& extra, bool final);
  std::string amount(double v) const;  // v in the unit
  std::string label_, unit_;
  uint64_t total_;
  bool enabled_, tty_, finished_ = false, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

std::string human_bytes(double bytes);     // "12.3 MB"
std::string human_count(double n);         // "1.23M"
std::string human_duration(double seconds);  // "1:02:03" or "0:12"

}  // namespace titan::data
