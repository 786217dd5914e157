// JSON helpers over nlohmann::json: untrusted input gives InvalidArgument naming the input and
// where it broke (never a library exception), depth and size are bounded, typed accessors name
// the field, and output round-trips.
#include "core/json.h"

#include <gtest/gtest.h>

#include "tpcomm/error.hpp"

namespace tpcomm::json {
namespace {

TEST(Json, RoundTripsEveryKindInOrder) {
  Json v;
  v["null"] = nullptr;
  v["t"] = true;
  v["int"] = int64_t{-9223372036854775807 - 1};
  v["big"] = uint64_t{18446744073709551615u};
  v["double"] = 31.507692337036133;
  v["whole_double"] = 63.0;
  v["tiny"] = 5e-324;
  v["text"] = "quote \" backslash \\ newline \n tab \t ctrl \x01 nul " + std::string(1, '\0') +
              " utf8 \xc3\xa9";
  v["arr"] = Json::array({1, "two", Json::array(), Json::object()});
  for (int indent : {-1, 2}) {
    std::string s = dump(v, indent);
    Json back = parse(s);
    EXPECT_EQ(back, v) << s;
    EXPECT_EQ(dump(back, indent), s);
  }
  EXPECT_EQ(dump(v).substr(0, 18), "{\"null\":null,\"t\":t") << "insertion order kept";
  EXPECT_EQ(dump(Json(63.0)), "63.0") << "a double stays a double";
  EXPECT_TRUE(parse("63").is_number_integer());
}

TEST(Json, WritesBytesThatAreNotUtf8AsReplacementCharacters) {
  EXPECT_EQ(dump(Json("a\xff"
                      "b")),
            "\"a\xef\xbf\xbd"
            "b\"");
}

void expect_error(std::string_view text, const std::string& part) {
  try {
    parse(text, "doc");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Json, RejectsMalformedInputWithOffset) {
  expect_error("", "doc: malformed JSON at offset 0: ");
  expect_error("", "unexpected end of input");
  expect_error("{\"a\":1,}", "doc: malformed JSON at offset 7: ");
  expect_error("[1 2]", "doc: malformed JSON at offset 3: ");
  expect_error("{\"a\" 1}", "doc: malformed JSON at offset 5: ");
  expect_error("\"abc", "doc: malformed JSON at offset 4: ");
  expect_error("\"a\x01\"", "control character");
  expect_error("\"\\x\"", "doc: malformed JSON at offset 2: ");
  expect_error("\"\\ud800\"", "surrogate");
  expect_error("\"\xff\"", "ill-formed UTF-8");
  expect_error("01", "doc: malformed JSON at offset 1: ");
  expect_error("1e999", "doc: malformed JSON: number overflow");
  expect_error("tru", "doc: malformed JSON at offset 3: ");
  expect_error("1 2", "doc: malformed JSON at offset 2: ");
  expect_error("@", "doc: malformed JSON at offset 0: ");
  expect_error(std::string(100, '['), "doc: malformed JSON: nesting deeper than 32");
  expect_error(std::string(kMaxInput + 1, ' '), "exceeds the limit");
  EXPECT_EQ(parse(std::string(kMaxDepth, '[') + std::string(kMaxDepth, ']')).size(), 1u);
}

TEST(Json, TypedAccessorsNameTheField) {
  Json v = parse("{\"n\":\"x\",\"i\":-3,\"u\":18446744073709551615,\"d\":7}");
  try {
    as_int(*find(v, "n"), "summary.n");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "summary.n must be an integer, not a string");
  }
  try {
    as_uint(*find(v, "i"), "summary.i");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "summary.i is negative: -3");
  }
  try {
    as_int(*find(v, "u"), "summary.u");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "summary.u is out of range: 18446744073709551615");
  }
  EXPECT_EQ(as_uint(*find(v, "u"), "u"), 18446744073709551615u);
  EXPECT_EQ(as_double(*find(v, "d"), "d"), 7.0);
  EXPECT_EQ(as_int(*find(v, "i"), "i"), -3);
  EXPECT_EQ(find(v, "missing"), nullptr);
  EXPECT_EQ(find(Json::array(), "n"), nullptr);
  EXPECT_THROW(as_object(Json::array(), "a"), InvalidArgument);
  EXPECT_THROW(as_array(Json::object(), "o"), InvalidArgument);
  EXPECT_THROW(as_bool(Json(1), "b"), InvalidArgument);
  EXPECT_THROW(as_string(Json(1), "s"), InvalidArgument);
  EXPECT_THROW(as_double(Json("1"), "d"), InvalidArgument);
}

}  // namespace
}  // namespace tpcomm::json
