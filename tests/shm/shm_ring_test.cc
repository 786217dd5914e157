// Unit tests of the shm transport's pieces without connections: the SPSC ring (records of
// every size, wrap-around, full ring, malformed records), the wire encodings (address blob,
// control messages, keys) against malformed input, and segment creation errors.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shm/shm_test_util.h"
#include "transports/shm/memory_region.h"
#include "transports/shm/ring.h"
#include "transports/shm/segment.h"
#include "transports/shm/wire.h"

namespace tpcomm::transport::shm {
namespace {

using shm_test::pattern;

// A ring over private memory (the layout is the same as in a segment).
struct LocalRing {
  explicit LocalRing(size_t ring_bytes) : mem(kRingHeaderBytes + ring_bytes + 4096) {
    base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(mem.data()) + 4095) & ~4095ull);
    prod.init(base, ring_bytes, 0x1234, 0, 1);
    EXPECT_EQ(cons.attach(base, kRingHeaderBytes + ring_bytes, 0, 1), "");
  }
  std::vector<uint8_t> mem;
  uint8_t* base;
  RingProducer prod;
  RingConsumer cons;
};

bool push_bytes(RingProducer& p, const std::vector<uint8_t>& b) {
  iovec v{const_cast<uint8_t*>(b.data()), b.size()};
  return p.push(RecordType::Message, {}, {&v, 1}, b.size());
}

// Demoted records (push's `demote`, CLDEMOTE) and the answer line's prefetch (prefetchw) are
// cache hints: records of every size up to and past kDemoteLines read back the same, in
// order, across wraps, interleaved with plain ones.
TEST(ShmRing, DemotedAndPrefetchedRecordsReadTheSame) {
  LocalRing r(8 * 1024);
  std::string err;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> b(static_cast<size_t>(i * 7) % 400);
    for (size_t j = 0; j < b.size(); ++j) b[j] = pattern(static_cast<size_t>(i), j);
    r.prod.prefetch_next();
    iovec v{b.data(), b.size()};
    ASSERT_TRUE(r.prod.push(RecordType::Message, {}, {&v, 1}, b.size(), (i % 3) != 0));
    r.prod.prefetch_next();  // once per position: the second call does nothing
    RingRecord rec;
    ASSERT_EQ(r.cons.peek(&rec, &err), 1) << err;
    ASSERT_EQ(rec.type, RecordType::Message);
    ASSERT_EQ(std::vector<uint8_t>(rec.payload.begin(), rec.payload.end()), b) << "record " << i;
    r.cons.pop();
    if (i % 8 == 0) r.cons.publish_head();
  }
}

TEST(ShmRing, EverySizeInOrderAcrossWraps) {
  LocalRing r(64 * 1024);
  size_t max = r.prod.max_payload();
  std::vector<size_t> sizes;
  for (size_t s = 0; s <= 200; ++s) sizes.push_back(s);
  for (size_t s = 201; s <= max; s += 97) sizes.push_back(s);
  sizes.push_back(max);
  size_t next_read = 0;
  std::string err;
  for (int lap = 0; lap < 3; ++lap) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> b(sizes[i]);
      for (size_t j = 0; j < b.size(); ++j) b[j] = pattern(i + lap, j);
      while (!push_bytes(r.prod, b)) {
        // Drain one record, checking it.
        RingRecord rec;
        ASSERT_EQ(r.cons.peek(&rec, &err), 1) << err;
        size_t k = next_read % sizes.size();
        int klap = static_cast<int>(next_read / sizes.size());
        ASSERT_EQ(rec.payload.size(), sizes[k]);
        for (size_t j = 0; j < rec.payload.size(); ++j)
          ASSERT_EQ(rec.payload[j], pattern(k + klap, j)) << "record " << next_read;
        r.cons.pop();
        r.cons.publish_head();
        ++next_read;
      }
    }
  }
  RingRecord rec;
  while (r.cons.peek(&rec, &err) == 1) {
    size_t k = next_read % sizes.size();
    ASSERT_EQ(rec.payload.size(), sizes[k]);
    r.cons.pop();
    ++next_read;
  }
  EXPECT_EQ(next_read, 3 * sizes.size());
}

TEST(ShmRing, FullRingRefusesAndArmsTheProducerFlag) {
  LocalRing r(64 * 1024);
  std::vector<uint8_t> b(1000, 7);
  int n = 0;
  while (push_bytes(r.prod, b)) ++n;
  EXPECT_GT(n, 50);
  EXPECT_LT(n, 66);
  EXPECT_EQ(r.prod.control()->producer_waiting.load(), 1u);
  std::string err;
  RingRecord rec;
  ASSERT_EQ(r.cons.peek(&rec, &err), 1);
  r.cons.pop();
  EXPECT_TRUE(r.cons.publish_head()) << "the waiting producer must be woken";
  EXPECT_FALSE(r.cons.publish_head()) << "only once";
  EXPECT_TRUE(push_bytes(r.prod, b));
}

TEST(ShmRing, SleepingConsumerIsWokenOnce) {
  LocalRing r(64 * 1024);
  r.cons.set_sleeping(true);
  std::vector<uint8_t> b(8, 1);
  ASSERT_TRUE(push_bytes(r.prod, b));
  EXPECT_TRUE(r.prod.take_sleeper());
  ASSERT_TRUE(push_bytes(r.prod, b));
  EXPECT_FALSE(r.prod.take_sleeper());
  EXPECT_TRUE(r.cons.has_data());
}

TEST(ShmRing, ConcurrentProducerAndConsumer) {
  LocalRing r(64 * 1024);
  constexpr int kCount = 200000;
  std::thread producer([&] {
    for (int i = 0; i < kCount; ++i) {
      uint64_t v[3] = {static_cast<uint64_t>(i), static_cast<uint64_t>(i) * 3, ~0ull};
      iovec io{v, static_cast<size_t>(8 + (i % 3) * 8)};
      while (!r.prod.push(RecordType::Message, {}, {&io, 1}, io.iov_len)) {
        std::this_thread::yield();
      }
    }
  });
  std::string err;
  int got = 0;
  auto end = shm_test::Clock::now() + std::chrono::seconds(60);
  while (got < kCount && shm_test::Clock::now() < end) {
    RingRecord rec;
    int rc = r.cons.peek(&rec, &err);
    ASSERT_GE(rc, 0) << err;
    if (rc == 0) {
      r.cons.publish_head();
      std::this_thread::yield();
      continue;
    }
    uint64_t v0;
    ASSERT_EQ(rec.payload.size(), static_cast<size_t>(8 + (got % 3) * 8));
    std::memcpy(&v0, rec.payload.data(), 8);
    ASSERT_EQ(v0, static_cast<uint64_t>(got));
    r.cons.pop();
    ++got;
  }
  producer.join();
  EXPECT_EQ(got, kCount);
}

TEST(ShmRing, MalformedRecordsAreReported) {
  LocalRing r(64 * 1024);
  std::vector<uint8_t> b(8, 1);
  ASSERT_TRUE(push_bytes(r.prod, b));
  auto* h = reinterpret_cast<RecordHeader*>(r.base + kRingHeaderBytes);
  std::string err;
  RingRecord rec;
  h->type = 77;
  EXPECT_EQ(r.cons.peek(&rec, &err), -1);
  EXPECT_NE(err.find("unknown record type 77"), std::string::npos) << err;
  h->type = static_cast<uint16_t>(RecordType::Message);
  h->length = 1u << 30;
  EXPECT_EQ(r.cons.peek(&rec, &err), -1);
  EXPECT_NE(err.find("overruns the ring"), std::string::npos) << err;
  h->type = static_cast<uint16_t>(RecordType::Pad);
  h->length = 100;
  EXPECT_EQ(r.cons.peek(&rec, &err), -1);
  EXPECT_NE(err.find("malformed pad"), std::string::npos) << err;
}

TEST(ShmRing, AttachChecksTheHeader) {
  LocalRing r(64 * 1024);
  RingConsumer c;
  EXPECT_NE(c.attach(r.base, kRingHeaderBytes + 64 * 1024, 0, 2).find("ranks 0 -> 1"),
            std::string::npos);
  EXPECT_NE(c.attach(r.base, kRingHeaderBytes + 32 * 1024, 0, 1).find("does not match"),
            std::string::npos);
  r.prod.control()->magic = 1;
  EXPECT_NE(c.attach(r.base, kRingHeaderBytes + 64 * 1024, 0, 1).find("magic"), std::string::npos);
}

TEST(ShmWire, AddressRoundTripAndMalformed) {
  PeerInfo in;
  in.pid = 42;
  in.uid = 7;
  in.instance = 99;
  in.probe_addr = 0x1000;
  in.probe_cookie = 5;
  in.socket_name = "tpcomm-shm/42/0/1";
  auto blob = encode_address(in);
  PeerInfo out = decode_address(blob, "rank 1");
  EXPECT_EQ(out.pid, 42u);
  EXPECT_EQ(out.socket_name, in.socket_name);
  for (size_t cut = 0; cut < blob.size(); ++cut) {
    std::vector<uint8_t> b(blob.begin(), blob.begin() + static_cast<long>(cut));
    EXPECT_THROW(decode_address(b, "rank 1"), TransportError) << cut;
  }
  auto bad = blob;
  bad[4] = 9;  // version
  try {
    decode_address(bad, "rank 1");
    FAIL();
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("wire version 9"), std::string::npos) << e.what();
  }
}

TEST(ShmWire, ControlMessagesSurviveRandomBytes) {
  Control c;
  c.type = ControlType::Hello;
  c.src_rank = 1;
  c.dst_rank = 0;
  c.world_size = 2;
  c.segment_bytes = ring_segment_bytes(65536);
  c.ring_bytes = 65536;
  c.from.pid = 3;
  c.from.socket_name = "x";
  c.job_id = "job";
  auto bytes = encode_control(c);
  Control d;
  ASSERT_EQ(decode_control(bytes, &d), "");
  EXPECT_EQ(d.job_id, "job");
  EXPECT_EQ(d.src_rank, 1);
  std::mt19937 rng(1);
  for (int i = 0; i < 20000; ++i) {
    auto b = bytes;
    b.resize(rng() % (bytes.size() + 8));
    for (int k = 0; k < 3 && !b.empty(); ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    Control x;
    (void)decode_control(b, &x);  // must not crash or over-read (ASan build checks)
  }
  Control v;
  bytes[4] = 2;
  EXPECT_NE(decode_control(bytes, &v).find("wire version 2"), std::string::npos);
}

TEST(ShmWire, KeysRoundTrip) {
  RemoteKey k;
  encode_key({11, 22}, &k);
  auto d = decode_key(k);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->instance, 11u);
  EXPECT_EQ(d->region, 22u);
  RemoteKey other;
  uint8_t junk[8] = {1, 2, 3};
  other.set_blob(junk);
  EXPECT_FALSE(decode_key(other).has_value());
}

TEST(ShmSegment, TooBigNamesBothSizes) {
  FsSpace sp = fs_space("/dev/shm");
  if (sp.total == 0) GTEST_SKIP() << "/dev/shm not found";
  size_t want = static_cast<size_t>(sp.free) + (size_t(1) << 30);
  try {
    Segment::create(want, "/dev/shm", "the ring to rank 9");
    FAIL() << "expected TransportError";
  } catch (const TransportError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("the ring to rank 9"), std::string::npos) << m;
    EXPECT_NE(m.find(format_bytes(want)), std::string::npos) << m;
    EXPECT_NE(m.find("free"), std::string::npos) << m;
    EXPECT_NE(m.find("/dev/shm"), std::string::npos) << m;
  }
}

TEST(ShmSegment, CreateAttachShare) {
  Segment s = Segment::create(8192, "/dev/shm", "a test segment");
  ASSERT_TRUE(s.valid());
  s.base()[100] = 42;
  Segment t = Segment::attach(::dup(s.fd()), 8192, "copy");
  EXPECT_EQ(t.base()[100], 42);
  t.base()[200] = 7;
  EXPECT_EQ(s.base()[200], 7);
  EXPECT_THROW(Segment::attach(::dup(s.fd()), 4096, "wrong size"), PeerError);
  EXPECT_EQ(format_bytes(256 * 1024), "256 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(10), "10 bytes");
}

// A segment whose tail (the staging area) is left a hole until it is claimed: creating and
// attaching it allocates only the reserved head, reserve() allocates the tail (by fallocate
// while the creator holds the descriptor, through the mapping once it gave it away), and what
// the creator then writes there is what the attached side reads.
TEST(ShmSegment, TailStaysAHoleUntilReserved) {
  const size_t head = 64 << 10, tail = 4 << 20;
  Segment s = Segment::create(head + tail, "/dev/shm", "a test segment", head);
  const int keep = ::dup(s.fd());  // to look at the file's allocation throughout
  auto allocated = [&] {
    struct stat st {};
    EXPECT_EQ(::fstat(keep, &st), 0);
    return static_cast<size_t>(st.st_blocks) * 512;
  };
  EXPECT_LT(allocated(), head + tail / 2);
  Segment t = Segment::attach(::dup(s.fd()), head + tail, "copy", head);
  t.base()[10] = 1;  // the head is usable at once
  EXPECT_EQ(s.base()[10], 1);
  EXPECT_LT(allocated(), head + tail / 2) << "attaching must not allocate the tail";
  EXPECT_EQ(s.reserve(head, tail / 2, "/dev/shm", "the tail"), "");
  EXPECT_GE(allocated(), head + tail / 2);
  EXPECT_LT(allocated(), head + tail);
  s.close_fd();  // as after the handshake
  EXPECT_EQ(s.reserve(head + tail / 2, tail / 2, "/dev/shm", "the tail"), "");
  EXPECT_GE(allocated(), head + tail);
  std::memset(s.base() + head, 0x5A, tail);
  EXPECT_EQ(t.base()[head + tail - 1], 0x5A);
  EXPECT_NE(s.reserve(head, 2 * tail, "/dev/shm", "the tail").find("outside the segment"),
            std::string::npos);
  ::close(keep);
}

TEST(ShmSegment, MissingDirectoryIsNamed) {
  try {
    Segment::create(8192, "/nonexistent-tpcomm-dir", "a test segment");
    FAIL();
  } catch (const TransportError& e) {
    EXPECT_NE(std::string(e.what()).find("TPCOMM_SHM_DIR"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tpcomm::transport::shm
