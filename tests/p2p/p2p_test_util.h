// Helpers shared by the p2p tests: the transports to parameterise over, typed test patterns.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/ibverbs_device.h"
#include "common/multiproc.h"
#include "core/config.h"
#include "core/log.h"
#include "tpcomm/tpcomm.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm::testing {

/// Registered transports that take part in the generic p2p tests (test-only ones excluded).
inline std::vector<std::string> p2p_transports() {
  std::vector<std::string> out;
  for (auto& n : transport::transport_names())
    if (n != "fake" && (n != "ibverbs" || ibverbs_for_tests())) out.push_back(n);
  return out;
}

/// A world group for a forked rank, on the given backend.
inline std::shared_ptr<ProcessGroup> make_world(
    RankContext& c, const std::string& backend,
    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  InitOptions o;
  o.backend = backend;
  o.timeout = timeout;
  return ProcessGroup::create(c.store, c.rank, c.world_size, o);
}

/// Sends this forked rank's log to a file of its own in the test's directory (set
/// TPCOMM_DEBUG and TPCOMM_DEBUG_SUBSYS in RunOptions::env); returns its path.
inline std::string log_to_rank_file(RankContext& c) {
  std::string path = c.dir + "/rank" + std::to_string(c.rank) + ".log";
  setenv("TPCOMM_DEBUG_FILE", path.c_str(), 1);
  config::reload();
  log::reload();
  return path;
}

/// The whole content of a file ("" when it cannot be read).
inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// One exchange with the other rank of a 2-rank world over backend "auto", logging to a file
/// of this rank's: returns the log (the link choice is in it).
inline std::string exchange_logging_links(RankContext& c) {
  std::string path = log_to_rank_file(c);
  auto pg = make_world(c, "auto");
  int32_t x = c.rank, y = -1;
  auto rw = pg->irecv(Tensor::of(&y, 1), 1 - c.rank);
  pg->send(Tensor::of(&x, 1), 1 - c.rank);
  rw->wait();
  EXPECT_EQ(y, 1 - c.rank);
  pg->destroy();
  return read_file(path);
}

/// Fills `buf` (bytes of elements of `t`) with a pattern that depends on (seed, index) and
/// is exact in every dtype.
inline void fill_pattern(std::vector<uint8_t>& buf, DType t, int seed) {
  size_t es = dtype_size(t);
  size_t n = buf.size() / es;
  for (size_t i = 0; i < n; ++i) {
    int v = static_cast<int>((i * 31 + static_cast<size_t>(seed) * 7) % 100);
    uint8_t* p = buf.data() + i * es;
    switch (t) {
      case DType::Bool:
        *p = v & 1;
        break;
      case DType::UInt8:
        *p = static_cast<uint8_t>(v);
        break;
      case DType::Int8:
        *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v);
        break;
      case DType::Int16: {
        int16_t x = static_cast<int16_t>(v);
        std::memcpy(p, &x, 2);
        break;
      }
      case DType::Int32: {
        int32_t x = v;
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::Int64: {
        int64_t x = v;
        std::memcpy(p, &x, 8);
        break;
      }
      case DType::Float16: {
        Half h(static_cast<float>(v));
        std::memcpy(p, &h.bits, 2);
        break;
      }
      case DType::BFloat16: {
        BFloat16 h(static_cast<float>(v));
        std::memcpy(p, &h.bits, 2);
        break;
      }
      case DType::Float32: {
        float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::Float64: {
        double x = v;
        std::memcpy(p, &x, 8);
        break;
      }
    }
  }
}

/// Index of the first byte where `got` differs from the pattern, or -1.
inline long check_pattern(const std::vector<uint8_t>& got, DType t, int seed) {
  std::vector<uint8_t> want(got.size());
  fill_pattern(want, t, seed);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return static_cast<long>(i);
  return -1;
}

/// A tensor over `buf` of dtype t (buf.size() must be a multiple of its element size).
inline Tensor as_tensor(std::vector<uint8_t>& buf, DType t) {
  return Tensor::raw(buf.data(), static_cast<int64_t>(buf.size() / dtype_size(t)), t);
}

/// Message of an exception thrown by f (empty if none).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception type: ") + e.what();
  }
  return "";
}

}  // namespace tpcomm::testing
