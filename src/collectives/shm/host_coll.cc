// HostColl: segment exchange through the group's store, and the entry points.
#include "collectives/shm/host_coll.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <random>
#include <sstream>
#include <thread>

#include "collectives/shm/algos.h"
#include "collectives/shm/catalogue.h"
#include "collectives/shm/segment.h"
#include "collectives/shm/team.h"
#include "collectives/util.h"
#include "core/config.h"
#include "core/cross_memory.h"
#include "core/log.h"
#include "tpcomm/error.hpp"

namespace tpcomm::coll::shm {

namespace {

// What a rank publishes about its segment: "OK pid fd nonce bytes chunk boot_id addr
// cross_min cross_mode cross", or "FAIL reason". In the verdict after mapping, `cross` (the
// rest of the line) is "yes" when this rank can read every peer's memory, else why not.
struct SegInfo {
  bool ok = false;
  std::string reason;
  long pid = 0;
  int fd = -1;
  uint64_t nonce = 0, bytes = 0, chunk = 0;
  std::string boot;
  uint64_t addr = 0;  // the segment's address in its owner (the cross-read probe reads it)
  uint64_t cross_min = 0;
  int cross_mode = 0;  // TPCOMM_SHM_COLL_CMA: 0 off, 1 auto, 2 on
  std::string cross = "-";
};

std::string encode(const SegInfo& s) {
  if (!s.ok) return "FAIL " + s.reason;
  std::ostringstream os;
  os << "OK " << s.pid << " " << s.fd << " " << s.nonce << " " << s.bytes << " " << s.chunk << " "
     << s.boot << " " << s.addr << " " << s.cross_min << " " << s.cross_mode << " " << s.cross;
  return os.str();
}

SegInfo decode(const std::string& text) {
  SegInfo s;
  std::istringstream is(text);
  std::string tag;
  is >> tag;
  if (tag != "OK") {
    s.reason = text.size() > 5 ? text.substr(5) : "unknown reason";
    return s;
  }
  is >> s.pid >> s.fd >> s.nonce >> s.bytes >> s.chunk >> s.boot >> s.addr >> s.cross_min >>
      s.cross_mode;
  s.ok = static_cast<bool>(is);
  std::getline(is >> std::ws, s.cross);
  if (!s.ok) s.reason = "malformed segment record '" + text + "'";
  return s;
}

std::vector<std::string> keys_of(const std::string& prefix, int size) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  return keys;
}

// Every rank's value under `prefix`, waiting until `dl`; with a watch, a member that died or
// stopped meanwhile fails the wait at once (PeerError) instead of at the deadline.
std::vector<std::string> gather_all(Store& store, const std::string& prefix, int rank, int size,
                                    Deadline dl, const HostColl::Liveness& live) {
  std::vector<std::string> keys = keys_of(prefix, size);
  if (!live.watch) {
    store.wait(keys, dl.remaining());
  } else {
    // Look-ups that do not block (a blocking wait cannot be interrupted), 1 to 50 ms apart.
    auto pause = std::chrono::milliseconds(1);
    while (!store.check(keys)) {
      std::string lost = live.watch->describe_failures(
          live.ranks, [](int g) { return "rank " + std::to_string(g); });
      if (!lost.empty())
        throw PeerError("shm_direct: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                        " cannot set up the group's shared-memory collectives: " + lost);
      if (dl.expired()) {
        store.wait(keys, std::chrono::milliseconds(0));  // the store's message, naming keys
        break;
      }
      std::this_thread::sleep_for(std::min(pause, dl.remaining()));
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }
  std::vector<std::string> out;
  for (const Bytes& b : store.multi_get(keys)) out.push_back(to_string(b));
  return out;
}

}  // namespace

std::unique_ptr<HostColl> HostColl::create(Store& store, int rank, int size, Deadline dl,
                                           const Liveness& live) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument("shm_direct: rank " + std::to_string(rank) +
                          " is not within a group of " + std::to_string(size));
  }
  // kBuffers staging buffers of at least 8 KiB; chunks of at least 4 KiB within one.
  size_t staging = config::get_size("TPCOMM_SHM_COLL_BYTES");
  staging = std::max<size_t>(staging, kBuffers * 8192) / (kBuffers * 4096) * (kBuffers * 4096);
  const size_t chunk =
      std::max<size_t>(
          std::min<size_t>(config::get_size("TPCOMM_SHM_COLL_CHUNK"), staging / kBuffers), 4096) /
      64 * 64;
  const int spin = static_cast<int>(config::get_int("TPCOMM_SHM_COLL_SPIN_US"));
  const std::string cross_cfg = config::get_enum("TPCOMM_SHM_COLL_CMA");
  const int cross_mode = cross_cfg == "off" ? 0 : cross_cfg == "on" ? 2 : 1;
  if (cross_mode != 0) xmem::allow_cross_memory_access();
  const StagePolicy::Mode stage_mode =
      StagePolicy::parse(config::get_enum("TPCOMM_SHM_COLL_STAGE_STORES"));
  const size_t bytes = kStagingOffset + staging;
  std::unique_ptr<HostColl> hc(new HostColl());
  hc->segments_.resize(static_cast<size_t>(size));
  for (int op = 0; op < kNumCollOps; ++op) {
    std::span<const AlgoInfo> c = shm_catalogue(static_cast<CollOp>(op));
    hc->algo_of_[op] = c.empty() ? &shm_catalogue(CollOp::Barrier)[0] : &c[0];
  }
  hc->last_ = &shm_catalogue(CollOp::Barrier)[0];
  hc->rules_ = current_algo_rules();
  // The tiny all_reduce's fast lane skips shm_selected(): only where no rule could decline it.
  hc->tiny_max_bytes_ =
      hc->rules_.empty() && size > 1 && size <= kSharedMaxRanks ? kSharedBytes : 0;
  // A fresh key space per instance: every rank creates its n-th instance with the n-th value.
  const int64_t gen = store.add("shm_coll/gen/" + std::to_string(rank), 1);
  const std::string prefix = "shm_coll/" + std::to_string(gen) + "/";

  SegInfo mine;
  try {
    MappedSegment seg = MappedSegment::create(bytes, "rank " + std::to_string(rank) + "'s staging");
    std::random_device rd;
    mine.nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
    auto* h = reinterpret_cast<SegHeader*>(seg.base());
    h->magic = kMagic;
    h->nonce = mine.nonce;
    h->bytes = bytes;
    h->rank = rank;
    h->size = size;
    mine.ok = true;
    mine.pid = ::getpid();
    mine.fd = seg.fd();
    mine.bytes = bytes;
    mine.chunk = chunk;
    mine.boot = boot_id();
    if (mine.boot.empty()) mine.boot = "unknown";
    mine.addr = reinterpret_cast<uint64_t>(seg.base());
    mine.cross_min = config::get_size("TPCOMM_SHM_COLL_CMA_MIN");
    mine.cross_mode = cross_mode;
    hc->segments_[static_cast<size_t>(rank)] = std::move(seg);
  } catch (const Error& e) {
    mine.reason = e.what();
  }
  store.set(prefix + "seg/" + std::to_string(rank), encode(mine));
  std::vector<std::string> recs = gather_all(store, prefix + "seg/", rank, size, dl, live);

  // Map every peer's segment; any problem becomes this rank's published failure. Then try a
  // cross-memory read of its header: a refusal only keeps the group to staging copies.
  std::string problem = mine.ok ? "" : mine.reason;
  std::string cross =
      cross_mode == 0 ? "TPCOMM_SHM_COLL_CMA=off on rank " + std::to_string(rank) : "";
  for (int r = 0; r < size && problem.empty(); ++r) {
    if (r == rank) continue;
    SegInfo s = decode(recs[static_cast<size_t>(r)]);
    const std::string who = "rank " + std::to_string(r);
    if (!s.ok) {
      problem = who + " could not create its segment: " + s.reason;
    } else if (s.boot != mine.boot) {
      problem = who + " runs on another host (boot id " + s.boot + ", here " + mine.boot + ")";
    } else if (s.bytes != bytes || s.chunk != chunk) {
      problem = who + " has TPCOMM_SHM_COLL_BYTES/TPCOMM_SHM_COLL_CHUNK giving " +
                std::to_string(s.bytes) + "/" + std::to_string(s.chunk) + " bytes, here " +
                std::to_string(bytes) + "/" + std::to_string(chunk) +
                "; set them alike on every rank";
    } else {
      try {
        MappedSegment seg =
            MappedSegment::open_peer(static_cast<pid_t>(s.pid), s.fd, s.bytes, who + "'s staging");
        auto* h = reinterpret_cast<const SegHeader*>(seg.base());
        if (h->magic != kMagic || h->nonce != s.nonce || h->rank != r || h->size != size) {
          problem = who + "'s segment (pid " + std::to_string(s.pid) +
                    ") is not the one it published; is it in another pid namespace?";
        } else {
          hc->segments_[static_cast<size_t>(r)] = std::move(seg);
          if (cross.empty()) {
            std::string why = xmem::probe_cross_memory(
                static_cast<pid_t>(s.pid), s.addr + offsetof(SegHeader, nonce), s.nonce);
            if (!why.empty())
              cross = "rank " + std::to_string(rank) + " cannot read " + who + ": " + why;
          }
        }
      } catch (const Error& e) {
        problem = e.what();
      }
    }
  }
  SegInfo verdict;
  verdict.ok = problem.empty();
  verdict.reason = problem;
  verdict.pid = ::getpid();
  verdict.boot = "-";
  verdict.cross = cross.empty() ? "yes" : cross;
  store.set(prefix + "mapped/" + std::to_string(rank), encode(verdict));
  std::vector<std::string> verdicts = gather_all(store, prefix + "mapped/", rank, size, dl, live);
  // Every peer holds its own descriptor now (or gave up): ours can go.
  hc->segments_[static_cast<size_t>(rank)].close_fd();
  for (int r = 0; r < size; ++r) {
    SegInfo v = decode(verdicts[static_cast<size_t>(r)]);
    if (!v.ok) {
      throw TransportError("shm_direct: rank " + std::to_string(rank) + " of " +
                           std::to_string(size) +
                           ": the group cannot use shared-memory collectives, rank " +
                           std::to_string(r) + " reports: " + v.reason);
    }
  }
  std::vector<uint8_t*> bases;
  for (const MappedSegment& s : hc->segments_) bases.push_back(s.base());
  hc->team_ = std::make_unique<Team>(rank, size, std::move(bases), staging, chunk, spin);
  hc->team_->set_check_calls(config::get_bool("TPCOMM_CHECK_SIGNATURE"));
  hc->team_->set_stage_mode(stage_mode);
  hc->team_->set_stop_at(static_cast<uint64_t>(config::get_int("TPCOMM_SHM_COLL_STOP_AT")));
  if (live.watch) hc->team_->set_watch(live.watch, live.ranks);
  // Single-copy reads when every rank can read every peer (the first refusal is logged);
  // blocks from the largest TPCOMM_SHM_COLL_CMA_MIN of the group, and "on" where every rank
  // says so, so that all agree.
  std::string refused;
  std::vector<long> pids;
  uint64_t cross_min = 0;
  bool always = true;
  for (int r = 0; r < size && size > 1; ++r) {
    SegInfo v = decode(verdicts[static_cast<size_t>(r)]);
    SegInfo s = decode(recs[static_cast<size_t>(r)]);
    if (refused.empty() && v.cross != "yes") refused = v.cross;
    pids.push_back(s.pid);
    cross_min = std::max(cross_min, s.cross_min);
    always = always && s.cross_mode == 2;
  }
  if (size > 1 && refused.empty()) {
    hc->team_->enable_cross_reads(std::move(pids), std::max<uint64_t>(cross_min, kSmallBytes + 1),
                                  always);
  } else if (size > 1) {
    hc->single_copy_note_ = refused;
    TPLOG(INFO, COLL) << "shm_direct: rank " << rank
                      << ": no single-copy reads, large broadcast and all_gather copy through "
                         "staging: "
                      << refused;
  } else {
    hc->single_copy_note_ = "a group of one rank reads no peer";
  }
  TPLOG(INFO, COLL) << "shm_direct: rank " << rank << "/" << size << " mapped " << size
                    << " segments of " << bytes << " bytes (chunk " << chunk << ")";
  return hc;
}

HostColl::~HostColl() {
  if (!team_ || !log::enabled(log::Level::Info, log::Subsys::COLL)) return;
  // What each collective's staging-store policy learned (docs/shm_collectives.md).
  const char* names[] = {"all_reduce", "all_gather (in place)", "all_gather (out of place)",
                         "broadcast"};
  static_assert(std::size(names) == static_cast<size_t>(Team::StageUse::kCount));
  for (int u = 0; u < static_cast<int>(Team::StageUse::kCount); ++u) {
    const StagePolicy& p = team_->stage_policy(static_cast<Team::StageUse>(u));
    if (p.timed_chunks(false) + p.timed_chunks(true) == 0) continue;
    TPLOG(INFO, COLL) << "shm_direct: rank " << team_->rank() << " " << names[u]
                      << " staging stores: cached " << p.timed_chunks(false) << " chunks, "
                      << p.rate(false) << " GB/s; streaming " << p.timed_chunks(true) << " chunks, "
                      << p.rate(true) << " GB/s";
  }
}

int HostColl::rank() const { return team_->rank(); }
int HostColl::size() const { return team_->size(); }

void HostColl::throw_broken(CollOp op) const {
  throw Error("shm_direct: " + std::string(coll_op_name(op)) + " on rank " +
              std::to_string(team_->rank()) +
              ": this group's shared-memory collectives are unusable after an earlier timeout "
              "(the ranks' steps no longer agree); recreate the group");
}

bool HostColl::begin(CollOp op, uint64_t bytes, const CommonOptions& options, Deadline dl,
                     const Tensor& t, int root, int redop) {
  if (team_->broken()) throw_broken(op);
  // No algorithm named in the options or TPCOMM_ALGO: shm_direct runs (shm_selected's answer,
  // without its call).
  if ((!options.algorithm.empty() || !rules_.empty()) && !shm_selected(op, bytes, options, rules_))
    return false;
  start(op, dl, t, root, redop);
  return true;
}

void HostColl::start(CollOp op, Deadline dl, const Tensor& t, int root, int redop) {
  team_->set_deadline(dl);
  CallSig s;
  s.op = static_cast<uint8_t>(op);
  s.dtype = static_cast<uint8_t>(t.dtype);
  s.count = static_cast<uint64_t>(t.numel);
  s.root = root;
  s.redop = static_cast<uint8_t>(redop < 0 ? 0xff : redop);
  team_->begin_call(s);
  last_ = algo_of_[static_cast<int>(op)];
}

bool HostColl::all_reduce(const AllReduceArgs& a, Deadline dl) {
  if (!begin(CollOp::AllReduce, a.input.nbytes(), a.options, dl, a.input, -1,
             static_cast<int>(a.op)))
    return false;
  const size_t count = static_cast<size_t>(a.input.numel);
  if (count == 0) return true;
  if (team_->size() > 1 &&
      allreduce_shm_tiny(*team_, a.input.data, a.output.data, count, a.input.dtype, a.op))
    return true;
  Reducer red(a.input.dtype, a.op, a.premul_scale);
  if (team_->size() == 1) {
    red.load(a.output.data, a.input.data, count);
    red.finish(a.output.data, count, 1);
    return true;
  }
  allreduce_shm(*team_, a.input.data, a.output.data, count, red);
  return true;
}

void HostColl::all_reduce_tiny(const Tensor& in, void* out, ReduceOp op, Deadline dl) {
  // begin() for a call that needs no selection, then all_reduce()'s steps for it.
  if (team_->broken()) throw_broken(CollOp::AllReduce);
  start(CollOp::AllReduce, dl, in, -1, static_cast<int>(op));
  const size_t count = static_cast<size_t>(in.numel);
  if (!allreduce_shm_tiny(*team_, in.data, out, count, in.dtype, op)) {
    // takes_tiny() and the shared slots agree on what fits; should they ever not, the
    // general loop computes the same result rather than none.
    allreduce_shm(*team_, in.data, out, count, Reducer(in.dtype, op, 1.0));
  }
}

bool HostColl::broadcast(const BroadcastArgs& a, Deadline dl) {
  if (!begin(CollOp::Broadcast, a.tensor.nbytes(), a.options, dl, a.tensor, a.root, -1))
    return false;
  const size_t bytes = a.tensor.nbytes();
  const void* src = a.input.data != nullptr ? a.input.data : a.tensor.data;
  if (bytes == 0) return true;
  if (team_->size() == 1) {
    if (src != a.tensor.data) std::memcpy(a.tensor.data, src, bytes);
    return true;
  }
  broadcast_shm(*team_, a.tensor.data, team_->rank() == a.root ? src : nullptr, bytes, a.root);
  return true;
}

bool HostColl::all_gather(const AllGatherArgs& a, Deadline dl) {
  if (!begin(CollOp::AllGather, a.output.nbytes(), a.options, dl, a.input, -1, -1)) return false;
  const size_t m = a.input.nbytes();
  if (m == 0) return true;
  if (team_->size() == 1) {
    if (a.input.data != a.output.data) std::memcpy(a.output.data, a.input.data, m);
    return true;
  }
  allgather_shm(*team_, a.input.data, a.output.data, m);
  return true;
}

bool HostColl::reduce_scatter(const ReduceScatterArgs& a, Deadline dl) {
  if (!begin(CollOp::ReduceScatter, a.input.nbytes(), a.options, dl, a.output, -1,
             static_cast<int>(a.op)))
    return false;
  const size_t m = static_cast<size_t>(a.output.numel);
  if (m == 0) return true;
  Reducer red(a.input.dtype, a.op, a.premul_scale);
  if (team_->size() == 1) {
    red.load(a.output.data, a.input.data, m);
    red.finish(a.output.data, m, 1);
    return true;
  }
  reduce_scatter_shm(*team_, a.input.data, a.output.data, m, red);
  return true;
}

bool HostColl::reduce(const ReduceArgs& a, Deadline dl) {
  if (!begin(CollOp::Reduce, a.input.nbytes(), a.options, dl, a.input, a.root,
             static_cast<int>(a.op)))
    return false;
  const size_t count = static_cast<size_t>(a.input.numel);
  if (count == 0) return true;
  Reducer red(a.input.dtype, a.op, a.premul_scale);
  const bool is_root = team_->rank() == a.root;
  if (team_->size() == 1) {
    red.load(a.output.data, a.input.data, count);
    red.finish(a.output.data, count, 1);
    return true;
  }
  reduce_shm(*team_, a.input.data, is_root ? a.output.data : nullptr, count, a.root, red);
  return true;
}

bool HostColl::barrier(Deadline dl) {
  if (!begin(CollOp::Barrier, 0, CommonOptions{}, dl, Tensor{}, -1, -1)) return false;
  if (team_->size() > 1) barrier_shm(*team_);
  return true;
}

}  // namespace tpcomm::coll::shm
