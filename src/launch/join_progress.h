// tprun's progress while its ranks start, on a terminal only: one stderr line, "tprun: waiting
// for ranks: 3/8 in init_process_group (4 s)", rewritten until every rank of the job has
// joined (each rank's init_process_group adds its key tpcomm/init/<rank> to the job's store),
// then cleared. Worker output hides the line first, so lines never mix.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace tpcomm {
class TCPStore;
}

namespace tpcomm::launch::detail {

class JoinProgress {
 public:
  /// Draws on `fd`; asks the store at host:port (job `job_id`) about `world_size` ranks.
  JoinProgress(int fd, std::string host, int port, std::string job_id, int world_size);
  ~JoinProgress();
  JoinProgress(const JoinProgress&) = delete;
  JoinProgress& operator=(const JoinProgress&) = delete;

  /// Asks the store (at most every 500 ms) and redraws; nothing once every rank joined.
  void tick();
  /// Clears the line if it is shown (before worker output reaches the terminal).
  void hide();
  bool done() const { return done_; }

  /// "tprun: waiting for ranks: 3/8 in init_process_group (4 s)". Public for tests.
  static std::string line(int joined, int world_size, double seconds);

 private:
  void query();

  int fd_;
  std::string host_;
  int port_;
  std::string job_id_;
  std::vector<bool> joined_;
  int count_ = 0;
  bool shown_ = false;
  bool done_ = false;
  std::unique_ptr<TCPStore> store_;
  std::chrono::steady_clock::time_point start_, next_query_, next_connect_;
};

}  // namespace tpcomm::launch::detail
