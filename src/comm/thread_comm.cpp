#include "comm/thread_comm.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"

namespace titan::comm {

namespace {

// What every group of one world shares: one lock and condition (simple, and enough for tests),
// the failure flag and the timeout.
struct World {
  std::mutex m;
  std::condition_variable cv;
  bool broken = false;
  double timeout = 0;
  std::string timeout_setting;
};

// One communicator's shared slots: a generation barrier, the posted buffers of the collective in
// flight, split results and the point-to-point mailboxes.
struct Group {
  explicit Group(std::shared_ptr<World> w, int n)
      : world(std::move(w)), n(n), in(size_t(n)), sizes(size_t(n)), color(size_t(n)), key(size_t(n)), made(size_t(n)) {}
  std::shared_ptr<World> world;
  const int n;
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const void*> in;
  std::vector<const size_t*> sizes;
  std::vector<int> color, key;
  std::vector<std::shared_ptr<Group>> made;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> mail;  // (src, dst) -> messages
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<Group> g, int rank) : group_(std::move(g)), rank_(rank) {}
  ThreadComm(const ThreadComm& parent, std::shared_ptr<Group> g, int rank)
      : Comm(parent), group_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->n; }
  const char* backend() const override { return "threads"; }
  [[noreturn]] void abort(int code) override {
    World& w = *group_->world;
    {
      std::lock_guard<std::mutex> l(w.m);
      w.broken = true;
    }
    w.cv.notify_all();
    fail("rank ", rank_, " of ", group_->n, " aborted the job (code ", code, ")");
  }

 protected:
  void do_all_gather(const void* in, void* out, size_t bytes) override {
    post(in, nullptr, "all_gather");
    for (int q = 0; q < group_->n; ++q)
      if (bytes) std::memcpy(static_cast<char*>(out) + size_t(q) * bytes, group_->in[size_t(q)], bytes);
    sync("all_gather");
  }
  void do_all_to_all(const void* in, void* out, size_t bytes) override {
    post(in, nullptr, "all_to_all");
    for (int q = 0; q < group_->n; ++q)
      if (bytes)
        std::memcpy(static_cast<char*>(out) + size_t(q) * bytes,
                    static_cast<const char*>(group_->in[size_t(q)]) + size_t(rank_) * bytes, bytes);
    sync("all_to_all");
  }
  void do_all_to_all_v(const void* in, const size_t* send_bytes, void* out, const size_t* recv_bytes) override {
    post(in, send_bytes, "all_to_all_v");
    size_t off_out = 0;
    for (int p = 0; p < group_->n; ++p) {
      const size_t* ps = group_->sizes[size_t(p)];
      size_t off_in = 0;
      for (int q = 0; q < rank_; ++q) off_in += ps[q];
      TITAN_CHECK(ps[rank_] == recv_bytes[p], "all_to_all_v: rank ", p, " sends ", ps[rank_], " bytes to rank ",
                  rank_, ", which expects ", recv_bytes[p]);
      if (ps[rank_])
        std::memcpy(static_cast<char*>(out) + off_out, static_cast<const char*>(group_->in[size_t(p)]) + off_in,
                    ps[rank_]);
      off_out += recv_bytes[p];
    }
    sync("all_to_all_v");
  }
  void do_send(const void* buf, size_t bytes, int dst) override {
    World& w = *group_->world;
    const char* p = static_cast<const char*>(buf);
    {
      std::lock_guard<std::mutex> l(w.m);
      group_->mail[{rank_, dst}].emplace_back(p, p + bytes);
    }
    w.cv.notify_all();
  }
  void do_recv(void* buf, size_t bytes, int src) override {
    World& w = *group_->world;
    std::unique_lock<std::mutex> l(w.m);
    auto& box = group_->mail[{src, rank_}];
    wait(l, [&] { return !box.empty(); }, "recv");
    std::vector<char> m = std::move(box.front());
    box.pop_front();
    l.unlock();
    TITAN_CHECK(m.size() == bytes, "recv of ", bytes, " bytes from rank ", src, ", which sent ", m.size());
    if (bytes) std::memcpy(buf, m.data(), bytes);
  }
  void do_broadcast(void* buf, size_t bytes, int root) override {
    post(buf, nullptr, "broadcast");
    if (rank_ != root && bytes) std::memcpy(buf, group_->in[size_t(root)], bytes);
    sync("broadcast");
  }
  void do_barrier() override {
    sync("barrier");
  }
  std::unique_ptr<Comm> do_split(int color, int key) override {
    Group& g = *group_;
    {
      std::lock_guard<std::mutex> l(g.world->m);
      g.color[size_t(rank_)] = color, g.key[size_t(rank_)] = key;
    }
    sync("split");
    // My group's members ordered by (key, rank); its first member makes the shared slots.
    std::vector<int> members;
    for (int q = 0; q < g.n; ++q)
      if (g.color[size_t(q)] == color) members.push_back(q);
    std::stable_sort(members.begin(), members.end(),
                     [&](int a, int b) { return g.key[size_t(a)] < g.key[size_t(b)]; });
    const int leader = *std::min_element(members.begin(), members.end());
    if (rank_ == leader) {
      std::lock_guard<std::mutex> l(g.world->m);
      g.made[size_t(leader)] = std::make_shared<Group>(g.world, int(members.size()));
    }
    sync("split");
    std::shared_ptr<Group> mine;
    {
      std::lock_guard<std::mutex> l(g.world->m);
      mine = g.made[size_t(leader)];
    }
    sync("split");
    if (rank_ == leader) {
      std::lock_guard<std::mutex> l(g.world->m);
      g.made[size_t(leader)].reset();
    }
    const int new_rank = int(std::find(members.begin(), members.end(), rank_) - members.begin());
    return std::make_unique<ThreadComm>(*this, std::move(mine), new_rank);
  }
  void apply_timeout(double seconds, const std::string& setting) override {
    std::lock_guard<std::mutex> l(group_->world->m);
    group_->world->timeout = seconds;
    group_->world->timeout_setting = setting;
  }

 private:
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& l, Pred ready, const char* what) {
    World& w = *group_->world;
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(w.timeout);
    const double timeout = w.timeout;
    for (;;) {
      if (w.broken) fail("rank ", rank_, " of ", group_->n, ": another rank failed during ", what);
      if (ready()) return;
      if (timeout > 0) {
        if (w.cv.wait_until(l, until) == std::cv_status::timeout && !ready() && !w.broken)
          fail("rank ", rank_, " of ", group_->n, ": ", what, " has not completed after ", timeout, " s",
               w.timeout_setting.empty() ? "" : " (" + w.timeout_setting + ")");
      } else {
        w.cv.wait(l);
      }
    }
  }
  // Posts my buffers for the collective and waits until every rank has posted.
  void post(const void* in, const size_t* sizes, const char* what) {
    {
      std::lock_guard<std::mutex> l(group_->world->m);
      group_->in[size_t(rank_)] = in;
      group_->sizes[size_t(rank_)] = sizes;
    }
    sync(what);
  }
  // A barrier of this group.
  void sync(const char* what) {
    Group& g = *group_;
    std::unique_lock<std::mutex> l(g.world->m);
    const uint64_t gen = g.generation;
    if (++g.arrived == g.n) {
      g.arrived = 0;
      ++g.generation;
      g.world->cv.notify_all();
      return;
    }
    wait(l, [&] { return g.generation != gen; }, what);
  }

  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

void run_threaded_ranks(int ranks, const std::function<void(Comm&)>& fn, double timeout_seconds) {
  TITAN_CHECK(ranks >= 1, "run_threaded_ranks: ", ranks, " ranks");
  auto world = std::make_shared<World>();
  world->timeout = timeout_seconds;
  auto group = std::make_shared<Group>(world, ranks);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<int> order;  // ranks in the order they failed
  std::mutex order_m;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadComm c(group, r);
        if (timeout_seconds > 0) c.set_timeout(timeout_seconds);
        fn(c);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        {
          std::lock_guard<std::mutex> l(order_m);
          order.push_back(r);
        }
        {
          std::lock_guard<std::mutex> l(world->m);
          world->broken = true;
        }
        world->cv.notify_all();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!order.empty()) std::rethrow_exception(errors[size_t(order.front())]);
}

}  // namespace titan::comm
