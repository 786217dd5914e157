// Liveness of the other ranks of a job: one watch per process, consulted by every wait on
// another rank (the engine's operations over any transport, the direct-read collectives on
// one host, the collectives' checks for lost members).
//
// Every rank publishes who it is (pid, boot id, pid namespace, process start time, host id)
// when its engine starts. A peer in the same kernel and pid namespace is watched by a pidfd
// (pidfd_open: it turns readable when the process exits, whatever killed it) and by its
// process state (/proc/<pid>/stat: a process stopped by SIGSTOP or a debugger for
// TPCOMM_HEARTBEAT_TIMEOUT is unresponsive). A peer on another host is watched by the
// engine's heartbeats (src/p2p/progress.cc), which report their verdicts here too (mark()),
// so that whoever asks gets the same answer.
#pragma once

#include <chrono>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpcomm/store.hpp"

namespace tpcomm {

class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;

  /// `stop_timeout`: how long a same-host peer may stay stopped before it is declared
  /// unresponsive (TPCOMM_HEARTBEAT_TIMEOUT; 0: never).
  PeerWatch(int rank, int world_size, std::string host_id, std::chrono::milliseconds stop_timeout);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// The store key under which rank `r` publishes its record.
  static std::string key(int r) { return "live/" + std::to_string(r); }
  /// This process's record: "pid boot pidns start host".
  std::string self_record() const;

  /// Learns the peers that have published their record in `store` (the engine's prefixed
  /// store) and are not known yet: non-blocking look-ups, at most once per second unless
  /// `now`. Never throws (a store that fails is retried later).
  void resolve(Store& store, bool now = false);
  /// Learns peer `r` from its record (opens a pidfd when it runs in this kernel and pid
  /// namespace). A record that does not parse is ignored.
  void add(int r, const std::string& record);

  /// Checks every watched peer now; returns those newly found dead or unresponsive (each
  /// reported once), with the reason: "dead: ..." or "unresponsive: ...", as every loss is
  /// worded ("rank 3 is " + reason).
  std::vector<std::pair<int, std::string>> poll();
  /// Why peer `r` is lost (checked now), or "" while it is alive or not watched.
  std::string failure(int r);
  /// Every one of `ranks` found lost (checked now), each with why; empty when none is.
  std::vector<std::pair<int, std::string>> failures(std::span<const int> ranks);
  /// failures() in words: "rank 2 is dead: ...; rank 3 is unresponsive: ..." ("" when none
  /// is), each rank named through `name` (e.g. its rank in a group).
  template <class Name>
  std::string describe_failures(std::span<const int> ranks, Name name) {
    std::string out;
    for (auto& [r, why] : failures(ranks))
      out += (out.empty() ? "" : "; ") + name(r) + " is " + why;
    return out;
  }
  /// Records a loss found elsewhere (a heartbeat timeout, a reset connection).
  void mark(int r, const std::string& reason);
  /// For a plain timeout: "rank 3 (pid N on host 'H') is alive and running" for a watched
  /// peer that is neither dead nor stopped, "... is alive but stopped (for N ms)", the reason of
  /// a lost one, or "" for a peer not watched by pid.
  std::string state(int r);
  /// True when rank `r` runs in this kernel and pid namespace, is watched by pid, and has
  /// this rank's host id (ranks given different TPCOMM_HOSTID values are different hosts to
  /// the heartbeats, even on one machine).
  bool local(int r);

 private:
  struct Peer {
    bool known = false;
    bool reported = false;  // poll() returned its failure already
    long pid = 0;
    int pidfd = -1;
    uint64_t start = 0;  // process start time (clock ticks since boot), 0: unknown
    std::string host;
    std::string failure;
    Clock::time_point stopped_since{};  // first check that found it stopped, {}: running
  };
  // Checks `p` (rank r) now under mu_; sets p.failure when it is lost.
  void check_locked(int r, Peer& p, Clock::time_point now);
  std::string who(const Peer& p) const;

  int rank_;
  std::string host_id_;
  std::chrono::milliseconds stop_timeout_;
  std::string boot_;
  uint64_t pidns_ = 0;
  std::mutex mu_;
  std::vector<Peer> peers_;
  Clock::time_point next_resolve_{};
  bool all_known_ = false;
};

}  // namespace tpcomm
