#include "data/progress.h"

#include <unistd.h>

#include <cstdio>

namespace titan::data {

std::string human_bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  const char* units[] = {"", "k", "M", "G", "T"};
  int u = 0;
  while (n >= 1000 && u < 4) {
    n /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f%s" : "%.0f%s", n, units[u]);
  return buf;
}

std::string human_duration(double s) {
  if (s < 0 || s > 1e8) return "?";
  long t = long(s + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  }
  return buf;
}

Progress::Progress(std::string label, uint64_t total, bool enabled, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), enabled_(enabled), tty_(::isatty(2) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

std::string Progress::amount(double v) const {
  return unit_ == "B" ? human_bytes(v) : human_count(v) + " " + unit_;
}

void Progress::update(uint64_t done, const std::string& extra) {
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  double since_start = std::chrono::duration<double>(now - start_).count();
  double since_last = std::chrono::duration<double>(now - last_).count();
  if (since_start < 2.0) return;
  if (tty_ ? since_last < 0.1 : (drawn_ && since_last < 10.0)) return;
  last_ = now;
  draw(done, extra, false);
}

void Progress::draw(uint64_t done, const std::string& extra, bool final) {
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double frac = total_ ? double(done) / double(total_) : 1.0;
  if (frac > 1) frac = 1;
  double rate = el > 0 ? double(done) / el : 0;
  double eta = rate > 0 ? double(total_ - (done < total_ ? done : total_)) / rate : -1;
  constexpr int kWidth = 30;
  std::string bar(size_t(frac * kWidth + 0.5), '#');
  bar.resize(kWidth, ' ');
  char line[512];
  std::snprintf(line, sizeof line, "%s [%s] %3.0f%% %s/%s  %s/s  ETA %s%s%s", label_.c_str(), bar.c_str(), frac * 100,
                amount(double(done)).c_str(), amount(double(total_)).c_str(), amount(rate).c_str(),
                human_duration(eta).c_str(), extra.empty() ? "" : "  ", extra.c_str());
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  drawn_ = true;
}

void Progress::finish(const std::string& summary) {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  if (tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "%s: %s in %.1f s\n", label_.c_str(), summary.c_str(), el);
}

Progress::~Progress() {
  if (!finished_ && enabled_ && tty_ && drawn_) std::fprintf(stderr, "\n");
}

}  // namespace titan::data
