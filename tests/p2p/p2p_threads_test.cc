// Tier (a): ranks as threads of one process over a HashStore, parameterised over every
// registered transport that can start here (STYLE.md 14).
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "common/ibverbs_device.h"
#include "tpcomm/tpcomm.hpp"
#include "tpcomm/transport/transport.hpp"

namespace tpcomm {
namespace {

// Runs body(rank, group) on n threads; every rank gets a world group on a shared HashStore.
void run_threads(int n, const std::string& backend,
                 const std::function<void(int, ProcessGroup&)>& body) {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(std::chrono::seconds(60));
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        InitOptions o;
        o.backend = backend;
        o.timeout = std::chrono::seconds(60);
        auto pg = ProcessGroup::create(store, r, n, o);
        body(r, *pg);
        pg->destroy();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

class P2PThreads : public ::testing::TestWithParam<std::string> {};

TEST_P(P2PThreads, RingOfSizes) {
  for (size_t bytes : {0ul, 1ul, 7ul, 4096ul, 100000ul, 1ul << 20}) {
    run_threads(3, GetParam(), [bytes](int rank, ProcessGroup& pg) {
      int n = pg.size();
      std::vector<uint8_t> out(bytes), in(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + rank);
      auto rw = pg.irecv(Tensor::of(in), (rank + n - 1) % n);
      auto sw = pg.isend(Tensor::of(out), (rank + 1) % n);
      sw->wait();
      rw->wait();
      int from = (rank + n - 1) % n;
      EXPECT_EQ(rw->source_rank(), from);
      for (size_t i = 0; i < bytes; ++i)
        ASSERT_EQ(in[i], static_cast<uint8_t>(i * 7 + from)) << "byte " << i << " of " << bytes;
    });
  }
}

std::vector<std::string> transports() {
  std::vector<std::string> out;
  for (auto& n : transport::transport_names())
    if (n != "ibverbs" || testing::ibverbs_for_tests()) out.push_back(n);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Transports, P2PThreads, ::testing::ValuesIn(transports()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tpcomm
