// TCPStore under many clients: 200 threads, each with its own connection, adding to one key,
// meeting at barriers, and waiting for keys that are released one at a time.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "store/tcp_store_test_util.h"
#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {
namespace {

using namespace std::chrono_literals;

constexpr int kClients = 200;

class TCPStoreMany : public ::testing::Test {
 protected:
  void SetUp() override {
    master_ = std::make_unique<TCPStore>("127.0.0.1", 0, -1, true, 120s, false);
    clients_.resize(kClients);
    // Connect in parallel, as ranks of a job would.
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; ++t) {
      ts.emplace_back([&, t] {
        for (int i = t; i < kClients; i += 8)
          clients_[i] = std::make_unique<TCPStore>("127.0.0.1", master_->port(), -1, false, 120s);
      });
    }
    for (auto& t : ts) t.join();
  }

  // Runs fn(i) on one thread per client and joins them; exceptions become failures.
  template <typename Fn>
  void on_every_client(Fn fn) {
    std::vector<std::thread> ts;
    for (int i = 0; i < kClients; ++i) {
      ts.emplace_back([&, i] {
        try {
          fn(i);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "client " << i << ": " << e.what();
        }
      });
    }
    for (auto& t : ts) t.join();
  }

  std::unique_ptr<TCPStore> master_;
  std::vector<std::unique_ptr<TCPStore>> clients_;
};

TEST_F(TCPStoreMany, TwoHundredClientsAddToOneKey) {
  constexpr int kAdds = 25;
  std::vector<std::vector<int64_t>> seen(kClients);
  on_every_client([&](int i) {
    for (int k = 0; k < kAdds; ++k) seen[i].push_back(clients_[i]->add("counter", 1));
  });
  EXPECT_EQ(master_->get_string("counter"), std::to_string(kClients * kAdds));
  // Every intermediate value was handed out exactly once.
  std::set<int64_t> all;
  for (auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kClients * kAdds));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kClients * kAdds);
}

TEST_F(TCPStoreMany, WaitsAreReleasedExactlyWhenTheirKeyAppears) {
  constexpr int kGroups = 5;
  std::atomic<int> published[kGroups] = {};
  std::atomic<int> released[kGroups] = {};
  std::atomic<int> early{0};
  std::atomic<int> waiting{0};
  std::thread releaser([&] {
    // Everybody parks first, then groups are released one by one.
    while (waiting.load() < kClients) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);
    for (int g = 0; g < kGroups; ++g) {
      std::this_thread::sleep_for(30ms);
      // Nobody of this group may have returned yet.
      EXPECT_EQ(released[g].load(), 0) << "group " << g << " released before its key was set";
      published[g] = 1;
      master_->set("go/" + std::to_string(g), std::string_view("1"));
      // The whole group is released (within a generous bound).
      Deadline d = Deadline::after(60s);
      while (released[g].load() < kClients / kGroups && !d.expired())
        std::this_thread::sleep_for(1ms);
      EXPECT_EQ(released[g].load(), kClients / kGroups) << "group " << g;
    }
  });
  on_every_client([&](int i) {
    int g = i % kGroups;
    ++waiting;
    if (i % 2 == 0) {
      clients_[i]->wait({"go/" + std::to_string(g)});
    } else {
      EXPECT_EQ(clients_[i]->get_string("go/" + std::to_string(g)), "1");
    }
    if (!published[g].load()) ++early;
    ++released[g];
  });
  releaser.join();
  EXPECT_EQ(early.load(), 0);
}

TEST_F(TCPStoreMany, RepeatedBarriers) {
  constexpr int kRounds = 5;
  on_every_client([&](int i) {
    for (int r = 0; r < kRounds; ++r) {
      std::string ctr = "bar/" + std::to_string(r) + "/ctr";
      std::string done = "bar/" + std::to_string(r) + "/done";
      if (clients_[i]->add(ctr, 1) == kClients) {
        clients_[i]->set(done, std::string_view("1"));
      } else {
        clients_[i]->wait({done});
      }
      // Nobody leaves the barrier before everybody arrived.
      EXPECT_EQ(clients_[i]->get_string(ctr), std::to_string(kClients));
    }
  });
}

TEST_F(TCPStoreMany, MultiGetOfKeysSetByOthers) {
  on_every_client([&](int i) {
    clients_[i]->set("rank/" + std::to_string(i), std::to_string(i * 3));
    int peer = (i + 1) % kClients, peer2 = (i + 7) % kClients;
    auto v =
        clients_[i]->multi_get({"rank/" + std::to_string(peer), "rank/" + std::to_string(peer2)});
    EXPECT_EQ(to_string(v[0]), std::to_string(peer * 3));
    EXPECT_EQ(to_string(v[1]), std::to_string(peer2 * 3));
  });
  EXPECT_EQ(master_->num_keys(), kClients);
}

}  // namespace
}  // namespace tpcomm
