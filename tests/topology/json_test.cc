// The small JSON reader/writer behind topology dumps and summaries: exact round trips and
// clear, located errors on bad input.
#include "topology/json.h"

#include <gtest/gtest.h>

#include "tpcomm/error.hpp"

namespace tpcomm::topo::json {
namespace {

TEST(Json, RoundTripsEveryKind) {
  Value v;
  v.set("null", Value());
  v.set("t", true);
  v.set("f", false);
  v.set("int", int64_t{-9223372036854775807 - 1});
  v.set("big", int64_t{9223372036854775807});
  v.set("double", 31.507692337036133);
  v.set("whole_double", 63.0);
  v.set("tiny", 5e-324);
  v.set("text", "quote \" backslash \\ newline \n tab \t ctrl \x01 utf8 \xc3\xa9");
  Value arr;
  arr.push(1).push("two").push(Value(Array{})).push(Value(Object{}));
  v.set("arr", arr);
  for (int indent : {0, 2}) {
    std::string s = write(v, indent);
    Value back = parse(s);
    EXPECT_EQ(back, v) << s;
    EXPECT_EQ(write(back, indent), s);
  }
  EXPECT_TRUE(parse("63.0").find("x") == nullptr);
  EXPECT_FALSE(parse("63.0").is_int()) << "a double stays a double";
  EXPECT_TRUE(parse("63").is_int());
  EXPECT_EQ(write(Value(63.0)), "63.0");
}

TEST(Json, DecodesEscapes) {
  EXPECT_EQ(parse("\"\\u00e9\\u20ac\\ud83d\\ude00\\/\"").as_string("s"),
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80/");
  EXPECT_EQ(parse(" [ 1 , 2 ] ").as_array("a").size(), 2u);
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
  expect_error("", "doc: malformed JSON at offset 0: unexpected end of input");
  expect_error("{\"a\":1,}", "offset 7: expected a member name in quotes");
  expect_error("[1 2]", "offset 3: expected ',' or ']' in array");
  expect_error("{\"a\" 1}", "expected ':' after member name");
  expect_error("\"abc", "unterminated string");
  expect_error("\"a\x01\"", "control character in string");
  expect_error("\"\\x\"", "bad escape");
  expect_error("\"\\ud800\"", "unpaired surrogate");
  expect_error("\"\\u12g4\"", "bad hex digit");
  expect_error("01", "leading zero");
  expect_error("-", "expected a digit");
  expect_error("99999999999999999999", "integer out of range");
  expect_error("1e999", "malformed number");
  expect_error("tru", "expected 'true'");
  expect_error("1 2", "unexpected text after the value");
  expect_error("@", "unexpected character '@'");
  expect_error(std::string(100, '['), "nesting deeper than 32");
}

TEST(Json, TypedAccessorsNameTheField) {
  Value v = parse("{\"n\":\"x\"}");
  try {
    v.find("n")->as_int("summary.n");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "summary.n must be an integer, not a string");
  }
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(parse("7").as_double("d"), 7.0);
}

}  // namespace
}  // namespace tpcomm::topo::json
