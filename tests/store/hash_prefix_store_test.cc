#include <gtest/gtest.h>

#include <thread>

#include "tpcomm/error.hpp"
#include "tpcomm/store.hpp"

namespace tpcomm {
namespace {

using namespace std::chrono_literals;

TEST(HashStore, BasicOps) {
  HashStore s;
  s.set("a", std::string_view("1"));
  EXPECT_EQ(s.get_string("a"), "1");
  EXPECT_EQ(s.add("c", 5), 5);
  EXPECT_EQ(s.add("c", -2), 3);
  EXPECT_EQ(s.get_string("c"), "3");
  s.set("x", std::string_view("zz"));
  EXPECT_THROW(s.add("x", 1), StoreError);
  EXPECT_TRUE(s.check({"a", "c"}));
  EXPECT_FALSE(s.check({"a", "nope"}));
  EXPECT_TRUE(s.delete_key("a"));
  EXPECT_FALSE(s.delete_key("a"));
  s.append("l", to_bytes("ab"));
  s.append("l", to_bytes("cd"));
  EXPECT_EQ(s.get_string("l"), "abcd");
  s.multi_set({"m1", "m2"}, {to_bytes("x"), to_bytes("y")});
  auto got = s.multi_get({"m2", "m1"});
  EXPECT_EQ(to_string(got[0]), "y");
  EXPECT_EQ(to_string(got[1]), "x");
  EXPECT_THROW(s.multi_set({"a"}, {}), InvalidArgument);
}

TEST(HashStore, CompareSetFollowsTorch) {
  HashStore s;
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("x"), to_bytes("y"))), "x");  // absent
  EXPECT_FALSE(s.check({"k"}));
  EXPECT_EQ(to_string(s.compare_set("k", {}, to_bytes("y"))), "y");  // absent, empty expected
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("z"), to_bytes("w"))), "y");  // mismatch
  EXPECT_EQ(to_string(s.compare_set("k", to_bytes("y"), to_bytes("w"))), "w");  // match
}

TEST(HashStore, WaitTimesOutNamingMissingKeys) {
  HashStore s;
  s.set("here", std::string_view("1"));
  try {
    s.wait({"here", "missing"}, 50ms);
    FAIL();
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'missing'"), std::string::npos) << m;
    EXPECT_EQ(m.find("'here'"), std::string::npos) << m;
  }
}

TEST(HashStore, WaitReleasedWhenKeyAppears) {
  HashStore s;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    s.set("k", std::string_view("v"));
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s.get_string("k"), "v");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  t.join();
}

TEST(PrefixStore, NamespacesKeys) {
  auto base = std::make_shared<HashStore>();
  PrefixStore a("a", base), b("b", base);
  a.set("k", std::string_view("1"));
  b.set("k", std::string_view("2"));
  EXPECT_EQ(a.get_string("k"), "1");
  EXPECT_EQ(b.get_string("k"), "2");
  EXPECT_EQ(base->get_string("a/k"), "1");
  EXPECT_EQ(a.add("n", 3), 3);
  EXPECT_TRUE(a.check({"k", "n"}));
  EXPECT_FALSE(b.check({"n"}));
  PrefixStore nested("x", std::make_shared<PrefixStore>("y", base));
  nested.set("z", std::string_view("q"));
  EXPECT_EQ(base->get_string("y/x/z"), "q");
}

TEST(HashStore, NumKeysCountsLiveKeys) {
  HashStore s;
  EXPECT_EQ(s.num_keys(), 0);
  s.set("a", std::string_view("1"));
  s.add("b", 1);
  s.append("c", to_bytes("x"));
  EXPECT_EQ(s.num_keys(), 3);
  s.delete_key("a");
  EXPECT_EQ(s.num_keys(), 2);
}

// Every operation of a PrefixStore lands under its prefix and is seen through it alone.
TEST(PrefixStore, EveryOperationGoesThroughThePrefix) {
  auto base = std::make_shared<HashStore>();
  PrefixStore p("pre", base);
  p.set("k", std::string_view("v"));
  EXPECT_EQ(base->get_string("pre/k"), "v");
  EXPECT_EQ(to_string(p.get("k")), "v");
  EXPECT_EQ(p.add("n", 2), 2);
  EXPECT_EQ(base->add("pre/n", 0), 2);
  EXPECT_EQ(to_string(p.compare_set("k", to_bytes("v"), to_bytes("w"))), "w");
  EXPECT_EQ(base->get_string("pre/k"), "w");
  p.append("l", to_bytes("ab"));
  p.append("l", to_bytes("cd"));
  EXPECT_EQ(base->get_string("pre/l"), "abcd");
  p.multi_set({"m1", "m2"}, {to_bytes("x"), to_bytes("y")});
  auto got = p.multi_get({"m2", "m1"});
  EXPECT_EQ(to_string(got[0]), "y");
  EXPECT_EQ(to_string(got[1]), "x");
  EXPECT_TRUE(base->check({"pre/m1", "pre/m2"}));
  EXPECT_TRUE(p.check({"k", "n", "l"}));
  EXPECT_FALSE(p.check({"pre/k"}));  // no double prefix
  p.wait({"k", "m1"}, 1s);
  try {
    p.wait({"absent"}, 20ms);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(p.delete_key("k"));
  EXPECT_FALSE(base->check({"pre/k"}));
  base->set("other", std::string_view("1"));
  EXPECT_EQ(base->num_keys(), 5);  // n, l, m1, m2 under the prefix, and other (k deleted)
}

}  // namespace
}  // namespace tpcomm
