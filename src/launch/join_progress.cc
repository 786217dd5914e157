// tprun's progress line while ranks start (join_progress.h).
#include "launch/join_progress.h"

#include <cstdio>

#include "launch/launch_internal.h"
#include "tpcomm/store.hpp"

namespace tpcomm::launch::detail {

JoinProgress::JoinProgress(int fd, std::string host, int port, std::string job_id, int world_size)
    : fd_(fd),
      host_(std::move(host)),
      port_(port),
      job_id_(std::move(job_id)),
      joined_(static_cast<size_t>(world_size), false),
      start_(std::chrono::steady_clock::now()),
      next_query_(start_),
      next_connect_(start_) {}

JoinProgress::~JoinProgress() { hide(); }

std::string JoinProgress::line(int joined, int world_size, double seconds) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "tprun: waiting for ranks: %d/%d in init_process_group (%.0f s)",
                joined, world_size, seconds);
  return buf;
}

void JoinProgress::query() {
  auto now = std::chrono::steady_clock::now();
  if (!store_) {
    if (now < next_connect_) return;
    next_connect_ = now + std::chrono::seconds(2);
    TCPStoreOptions o;
    o.job_id = job_id_;
    o.timeout = std::chrono::seconds(1);
    o.wait_for_workers = false;
    try {
      store_ = std::make_unique<TCPStore>(host_, static_cast<uint16_t>(port_), o);
    } catch (const std::exception&) {
      return;  // not up yet (another node hosts it): the next tick tries again
    }
  }
  try {
    for (size_t r = 0; r < joined_.size(); ++r) {
      if (joined_[r] || !store_->check({"tpcomm/init/" + std::to_string(r)})) continue;
      joined_[r] = true;
      ++count_;
    }
  } catch (const std::exception&) {
    store_.reset();  // gone or stuck: reconnect later
  }
}

void JoinProgress::tick() {
  if (done_) return;
  auto now = std::chrono::steady_clock::now();
  // Drawn after each query only: a line hidden for worker output comes back with news.
  if (now < next_query_) return;
  next_query_ = now + std::chrono::milliseconds(500);
  query();
  if (count_ == static_cast<int>(joined_.size())) {
    hide();
    done_ = true;
    return;
  }
  double secs = std::chrono::duration<double>(now - start_).count();
  std::string s = "\r" + line(count_, static_cast<int>(joined_.size()), secs) + "\033[K";
  shown_ = write_fully(fd_, s.data(), s.size());
}

void JoinProgress::hide() {
  if (!shown_) return;
  shown_ = false;
  write_fully(fd_, "\r\033[K", 4);
}

}  // namespace tpcomm::launch::detail
