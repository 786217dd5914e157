// Registration of the shm transport: its TPCOMM_SHM_* variables and its factory.
#include <span>

#include "core/config.h"
#include "tpcomm/error.hpp"
#include "tpcomm/transport/transport.hpp"
#include "transports/shm/device.h"

namespace tpcomm::transport {

namespace {

using config::Param;
using T = config::Type;

// clang-format off
constexpr Param kShmParams[] = {
  {"TPCOMM_SHM_CMA", T::Bool, "1", "",
   "shm: put by a single cross-memory copy (process_vm_writev) into the peer's buffer. 0 copies "
   "through the shared ring instead (two copies); that is also the automatic fall-back, logged "
   "with the reason, where ptrace rules forbid cross-memory access.", "shm"},
  {"TPCOMM_SHM_DIR", T::String, "/dev/shm", "",
   "shm: tmpfs directory whose space holds the rings (unnamed O_TMPFILE files: nothing is left "
   "there, even after kill -9).", "shm"},
  {"TPCOMM_SHM_PUT_CHUNK", T::Size, "4M", "",
   "shm: bytes a put copies per step (the post, then each progress call) before other work "
   "runs; larger is marginally faster, smaller is fairer to other peers.", "shm"},
  {"TPCOMM_SHM_RING_SIZE", T::Size, "256K", "",
   "shm: bytes of each message ring (one per sender and receiver on a host); at least 64K, a "
   "multiple of 4K. The largest message is a quarter of it, capped at 16K.", "shm"},
  {"TPCOMM_SHM_SHARED_MIN", T::Size, "1M", "",
   "shm: puts of at least this many bytes are copied by both ends at once: through the "
   "staging area (TPCOMM_SHM_STAGE_SIZE), or, without one, by cross-memory copies (the "
   "receiver pulls chunks with process_vm_readv while the sender writes others); 0 leaves "
   "every copy to the sender.", "shm"},
  {"TPCOMM_SHM_STAGE_CHUNK", T::Size, "1M", "",
   "shm: bytes per slot of the staging area; a multiple of 4K, from a sixteenth to a half of "
   "TPCOMM_SHM_STAGE_SIZE.", "shm"},
  {"TPCOMM_SHM_STAGE_MIN", T::Size, "16M", "",
   "shm: where cross-memory access works, puts of at least this many bytes go through the "
   "staging area and smaller ones by cross-memory copies, which are faster while the data "
   "fits in the caches (1-8 MiB: 10-18 GB/s against 6-11 staged here). Without cross-memory "
   "access every put of TPCOMM_SHM_SHARED_MIN and more is staged.", "shm"},
  {"TPCOMM_SHM_STAGE_PULL", T::Size, "256K", "",
   "shm: where cross-memory access works, a receiver of a staged put that finds no chunk "
   "staged pulls this many bytes from the put's end itself (process_vm_readv) instead of "
   "waiting, while the sender, whose copy is the slower one, stages the front; a multiple of "
   "4K, 0 to only drain.", "shm"},
  {"TPCOMM_SHM_STAGE_STORES", T::Enum, "auto", "auto|cached|streaming",
   "shm: how a sender writes the staging chunks of a large put. cached: the receiver fetches "
   "them from the sender's caches (fastest where the cores share a cache); streaming: through "
   "memory (steady where cache-to-cache transfers are slow, as between vCPUs their host placed "
   "far apart); auto: times its own copies and uses the faster kind, trying the other now and "
   "then (as TPCOMM_SHM_COLL_STAGE_STORES for the collectives).", "shm"},
  {"TPCOMM_SHM_STAGE_SIZE", T::Size, "4M", "",
   "shm: staging area per sender and receiver for large puts (TPCOMM_SHM_STAGE_MIN and up): "
   "the sender copies chunks in while the receiver copies them out, both at memcpy speed "
   "(kernel cross-memory copies run at about half of it over 4 KiB pages). Claimed in "
   "/dev/shm at the first such put to a peer; 0 keeps large puts to cross-memory copies.",
   "shm"},
};
// clang-format on

}  // namespace

namespace shm {

Settings Settings::from_config() {
  Settings s;
  s.ring_bytes = config::get_size("TPCOMM_SHM_RING_SIZE");
  if (s.ring_bytes < 64 * 1024 || s.ring_bytes % 4096 != 0) {
    throw ConfigError("TPCOMM_SHM_RING_SIZE=" + config::get_string("TPCOMM_SHM_RING_SIZE") +
                      " is unusable: the ring must be at least 64K and a multiple of 4K "
                      "(e.g. 256K)");
  }
  s.max_message = std::min<size_t>(16 * 1024, ring_max_payload(s.ring_bytes));
  s.cma = config::get_bool("TPCOMM_SHM_CMA");
  s.put_chunk = config::get_size("TPCOMM_SHM_PUT_CHUNK");
  if (s.put_chunk < 4096) {
    throw ConfigError("TPCOMM_SHM_PUT_CHUNK=" + config::get_string("TPCOMM_SHM_PUT_CHUNK") +
                      " is too small: use at least 4K (e.g. 4M)");
  }
  s.shared_min = config::get_size("TPCOMM_SHM_SHARED_MIN");
  s.stage_chunk = config::get_size("TPCOMM_SHM_STAGE_CHUNK");
  s.stage_min = config::get_size("TPCOMM_SHM_STAGE_MIN");
  s.stage_pull = config::get_size("TPCOMM_SHM_STAGE_PULL");
  if (s.stage_pull % kStagePage != 0 || s.stage_pull > (size_t{1} << 30)) {
    throw ConfigError("TPCOMM_SHM_STAGE_PULL=" + config::get_string("TPCOMM_SHM_STAGE_PULL") +
                      " is unusable: use a multiple of 4K up to 1G (e.g. 256K), or 0");
  }
  const size_t stage = config::get_size("TPCOMM_SHM_STAGE_SIZE");
  s.stage_slots = 0;
  if (stage > 0) {
    if (s.stage_chunk < 4096 || s.stage_chunk % 4096 != 0 || stage < 2 * s.stage_chunk ||
        stage > kMaxStageBytes || stage / s.stage_chunk > kMaxStageSlots) {
      throw ConfigError(
          "TPCOMM_SHM_STAGE_SIZE=" + config::get_string("TPCOMM_SHM_STAGE_SIZE") +
          " with TPCOMM_SHM_STAGE_CHUNK=" + config::get_string("TPCOMM_SHM_STAGE_CHUNK") +
          " is unusable: the chunk must be a multiple of 4K and the area 2 to 16 "
          "chunks, at most 1G (e.g. 4M of 1M chunks), or 0 for none");
    }
    s.stage_slots = static_cast<uint32_t>(stage / s.stage_chunk);
  }
  s.stage_stores = StagePolicy::parse(config::get_enum("TPCOMM_SHM_STAGE_STORES"));
  s.dir = config::get_string("TPCOMM_SHM_DIR");
  if (s.dir.empty()) s.dir = "/dev/shm";
  return s;
}

}  // namespace shm

void register_shm_transport() {
  config::register_params(kShmParams);
  register_transport("shm", [](const TransportContext& ctx) -> std::unique_ptr<Transport> {
    return std::make_unique<shm::ShmTransport>(ctx, shm::Settings::from_config());
  });
}

}  // namespace tpcomm::transport
