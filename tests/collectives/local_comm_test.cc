// LocalWorld, the in-process CollComm the collective tests run on: FIFO matching per
// (source, destination, tag), rendezvous completion, size mismatches, timeouts naming the
// operation, abort propagation, cancellation by destroying a pending request, wait_any.
#include "collectives/local_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "tpcomm/error.hpp"

namespace tpcomm::coll {
namespace {

using std::chrono::milliseconds;

LocalWorld::Options quick(int ms) {
  LocalWorld::Options o;
  o.timeout = milliseconds(ms);
  return o;
}

TEST(LocalWorld, MatchesInPostingOrderPerTag) {
  LocalWorld w(2);
  w.run([](CollComm& c) {
    if (c.rank() == 0) {
      int a = 1, b = 2, x = 3;
      Request s1 = c.isend(&a, sizeof a, 1, 5);
      Request s2 = c.isend(&x, sizeof x, 1, 6);
      Request s3 = c.isend(&b, sizeof b, 1, 5);
      std::vector<Request> all;
      all.push_back(std::move(s1));
      all.push_back(std::move(s2));
      all.push_back(std::move(s3));
      c.wait_all(all);
    } else {
      int v6 = 0, v5a = 0, v5b = 0;
      Request r6 = c.irecv(&v6, sizeof v6, 0, 6);
      Request ra = c.irecv(&v5a, sizeof v5a, 0, 5);
      Request rb = c.irecv(&v5b, sizeof v5b, 0, 5);
      c.wait(rb);
      c.wait(ra);
      c.wait(r6);
      EXPECT_EQ(v5a, 1);
      EXPECT_EQ(v5b, 2);
      EXPECT_EQ(v6, 3);
    }
  });
  EXPECT_EQ(w.unmatched(), 0u);
}

TEST(LocalWorld, SendCompletesOnlyWhenMatched) {
  LocalWorld w(2);
  w.run([](CollComm& c) {
    int v = 7;
    if (c.rank() == 0) {
      Request s = c.isend(&v, sizeof v, 1, 0);
      EXPECT_FALSE(c.test(s)) << "no receive posted yet";
      EXPECT_FALSE(s.empty());
      Request go = c.isend(&v, 0, 1, 1);  // lets rank 1 post its receive
      c.wait(go);
      c.wait(s);
      EXPECT_TRUE(s.empty());
      EXPECT_TRUE(c.test(s));
    } else {
      Request go = c.irecv(nullptr, 0, 0, 1);
      c.wait(go);
      int got = 0;
      Request r = c.irecv(&got, sizeof got, 0, 0);
      c.wait(r);
      EXPECT_EQ(got, 7);
    }
  });
}

TEST(LocalWorld, SizeMismatchFailsBothSidesWithAMismatchError) {
  LocalWorld w(2, quick(5000));
  try {
    w.run([](CollComm& c) {
      std::vector<char> buf(16);
      Request r = c.rank() == 0 ? c.isend(buf.data(), 12, 1, 3) : c.irecv(buf.data(), 16, 0, 3);
      c.wait(r);
    });
    FAIL() << "no error";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 sent 12 bytes to rank 1 with tag 3"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("receive of 16 bytes"), std::string::npos);
  }
}

TEST(LocalWorld, TimeoutNamesTheOperationAndAbortsTheOthers) {
  LocalWorld w(3, quick(200));
  try {
    w.run([](CollComm& c) {
      int v = 0;
      if (c.rank() == 1) {
        Request r = c.irecv(&v, sizeof v, 2, 9);  // rank 2 never sends
        c.wait(r);
      } else {
        Request r = c.irecv(&v, sizeof v, 1, 1);  // nor does rank 1: aborted, not timed out
        c.wait(r);
      }
    });
    FAIL() << "no error";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("timed out after 200 ms"), std::string::npos) << m;
    EXPECT_NE(m.find("from rank"), std::string::npos) << m;
  }
  // The world is reset and usable again.
  w.run([](CollComm& c) {
    int v = c.rank();
    Request r = c.rank() == 0 ? c.irecv(&v, sizeof v, 1, 0) : c.isend(&v, sizeof v, 0, 0);
    if (c.rank() < 2) c.wait(r);
  });
}

TEST(LocalWorld, AnErrorOnOneRankAbortsTheOthersQuickly) {
  LocalWorld w(4, quick(60000));
  auto start = std::chrono::steady_clock::now();
  try {
    w.run([](CollComm& c) {
      if (c.rank() == 2) throw InvalidArgument("rank 2 gave up");
      int v = 0;
      Request r = c.irecv(&v, sizeof v, (c.rank() + 1) % 4, 0);
      c.wait(r);
    });
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "rank 2 gave up");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(LocalWorld, DestroyingAPendingRequestCancelsIt) {
  LocalWorld w(2);
  w.run([](CollComm& c) {
    int v = 0;
    if (c.rank() == 1) {
      {
        std::vector<int> scratch(1);
        Request r = c.irecv(scratch.data(), sizeof(int), 0, 0);
      }  // cancelled: the next message must go to the next receive
      Request ready = c.isend(&v, 0, 0, 1);
      c.wait(ready);
      Request r = c.irecv(&v, sizeof v, 0, 0);
      c.wait(r);
      EXPECT_EQ(v, 42);
    } else {
      Request ready = c.irecv(nullptr, 0, 1, 1);
      c.wait(ready);
      v = 42;
      Request s = c.isend(&v, sizeof v, 1, 0);
      c.wait(s);
    }
  });
  EXPECT_EQ(w.unmatched(), 0u);
}

TEST(LocalWorld, WaitAnyReturnsACompletedOne) {
  LocalWorld w(3);
  w.run([](CollComm& c) {
    int v = c.rank();
    if (c.rank() == 0) {
      int a = -1, b = -1;
      Request ra = c.irecv(&a, sizeof a, 1, 0), rb = c.irecv(&b, sizeof b, 2, 0);
      Request* both[] = {&ra, &rb};
      int first = c.wait_any(both);
      EXPECT_TRUE(first == 0 || first == 1);
      int second = c.wait_any(both);
      EXPECT_EQ(first + second, 1);
      EXPECT_EQ(c.wait_any(both), -1) << "all empty";
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
    } else {
      Request s = c.isend(&v, sizeof v, 0, 0);
      c.wait(s);
    }
  });
}

TEST(LocalWorld, RejectsBadPeersAndSizes) {
  EXPECT_THROW(LocalWorld(0), InvalidArgument);
  LocalWorld w(2);
  EXPECT_THROW(w.run([](CollComm& c) { c.isend(nullptr, 0, 2, 0); }), InvalidArgument);
}

}  // namespace
}  // namespace tpcomm::coll
