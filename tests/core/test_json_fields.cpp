// Field tables (runtime/core/json_fields.hpp): one list of fields writes and reads a struct,
// types are checked before converting, and errors name the field and its path.
#include "runtime/core/json_fields.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"

namespace saturn {
namespace {

struct Thing {
  std::string name = "x";
  int count = 1;
  std::int64_t big = 0;
  std::uint64_t seed = 7;
  double rate = 0.5;
  float eps = 1e-5f;
  bool on = false;
  std::vector<int> ranks;
  std::vector<std::string> tags;
  std::string note = "default";  // optional
};

constexpr auto kFields = std::make_tuple(
    json_fields::field("name", &Thing::name), json_fields::field("count", &Thing::count),
    json_fields::field("big", &Thing::big), json_fields::field("seed", &Thing::seed),
    json_fields::field("rate", &Thing::rate), json_fields::field("eps", &Thing::eps),
    json_fields::field("on", &Thing::on), json_fields::field("ranks", &Thing::ranks),
    json_fields::field("tags", &Thing::tags), json_fields::optional_field("note", &Thing::note));

template <typename E = json_fields::FieldError>
std::string error_of(const nlohmann::json& j) {
  try {
    Thing t;
    json_fields::read_fields<E>(j, t, kFields, "thing");
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

nlohmann::json good() {
  Thing t;
  t.name = "a";
  t.count = 3;
  t.big = -(std::int64_t{1} << 40);
  t.seed = ~std::uint64_t{0};
  t.rate = 0.25;
  t.on = true;
  t.ranks = {2, 2};
  t.tags = {"p", "q"};
  t.note = "n";
  return json_fields::object_of(t, kFields);
}

TEST(JsonFields, WritesWhatHandWrittenJsonWrites) {
  const nlohmann::json j = good();
  const nlohmann::json by_hand = {{"name", "a"},
                                  {"count", 3},
                                  {"big", -(std::int64_t{1} << 40)},
                                  {"seed", ~std::uint64_t{0}},
                                  {"rate", 0.25},
                                  {"eps", 1e-5f},
                                  {"on", true},
                                  {"ranks", {2, 2}},
                                  {"tags", {"p", "q"}},
                                  {"note", "n"}};
  EXPECT_EQ(j.dump(), by_hand.dump());
  // ordered_json keeps the table's order.
  const auto o = json_fields::object_of<nlohmann::ordered_json>(Thing{}, kFields);
  std::vector<std::string> keys;
  for (const auto& [k, v] : o.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"name", "count", "big", "seed", "rate", "eps", "on",
                                            "ranks", "tags", "note"}));
}

TEST(JsonFields, RoundTrips) {
  Thing t;
  json_fields::read_fields(good(), t, kFields, "");
  EXPECT_EQ(t.name, "a");
  EXPECT_EQ(t.count, 3);
  EXPECT_EQ(t.big, -(std::int64_t{1} << 40));
  EXPECT_EQ(t.seed, ~std::uint64_t{0});
  EXPECT_EQ(t.rate, 0.25);
  EXPECT_EQ(t.eps, 1e-5f);
  EXPECT_TRUE(t.on);
  EXPECT_EQ(t.ranks, (std::vector<int>{2, 2}));
  EXPECT_EQ(t.tags, (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(t.note, "n");
  // A double field reads an integer.
  nlohmann::json j = good();
  j["rate"] = 2;
  json_fields::read_fields(j, t, kFields, "");
  EXPECT_EQ(t.rate, 2.0);
}

TEST(JsonFields, OptionalFieldsKeepTheirDefault) {
  nlohmann::json j = good();
  j.erase("note");
  Thing t;
  json_fields::read_fields(j, t, kFields, "");
  EXPECT_EQ(t.note, "default");
  EXPECT_EQ(t.count, 3);
}

TEST(JsonFields, ErrorsNameTheField) {
  nlohmann::json j = good();
  j.erase("count");
  EXPECT_EQ(error_of(j), "thing.count: missing");
  j = good();
  j["count"] = 1.5;  // never truncated
  EXPECT_EQ(error_of(j), "thing.count: expected an integer, got 1.5");
  j["count"] = "3";
  EXPECT_EQ(error_of(j), "thing.count: expected a number, got \"3\"");
  j = good();
  j["rate"] = true;
  EXPECT_EQ(error_of(j), "thing.rate: expected a number, got true");
  j = good();
  j["on"] = 1;
  EXPECT_EQ(error_of(j), "thing.on: expected true or false, got 1");
  j = good();
  j["name"] = 5;
  EXPECT_EQ(error_of(j), "thing.name: expected a string, got 5");
  j = good();
  j["ranks"] = {1, "two"};
  EXPECT_EQ(error_of(j), "thing.ranks: expected an array of integers, got [1,\"two\"]");
  j = good();
  j["tags"] = "p";
  EXPECT_EQ(error_of(j), "thing.tags: expected an array of strings, got \"p\"");
  j = good();
  j["note"] = nullptr;  // optional, but present: still checked
  EXPECT_EQ(error_of(j), "thing.note: expected a string, got null");
  EXPECT_EQ(error_of(nlohmann::json::array()), "thing: expected a JSON object, got []");
  Thing t;
  try {
    json_fields::read_fields(nlohmann::json(3), t, kFields, "");
    FAIL();
  } catch (const json_fields::FieldError& e) {
    EXPECT_STREQ(e.what(), "expected a JSON object, got 3");
  }
}

TEST(JsonFields, ThrowsTheCallersType) {
  nlohmann::json j = good();
  j.erase("seed");
  EXPECT_EQ(error_of<InputError>(j), "thing.seed: missing");
  // The default is a json::exception, so existing handlers of nlohmann's errors catch it.
  try {
    Thing t;
    json_fields::read_fields(j, t, kFields, "thing");
    FAIL();
  } catch (const nlohmann::json::exception& e) {
    EXPECT_STREQ(e.what(), "thing.seed: missing");
  }
  // One value on its own.
  int n = 0;
  json_fields::read_value(nlohmann::json{{"n", 4}}, "top", "n", n);
  EXPECT_EQ(n, 4);
  json_fields::read_value(nlohmann::json::object(), "top", "n", n, false);
  EXPECT_EQ(n, 4);
  try {
    json_fields::read_value<InputError>(nlohmann::json::object(), "", "n", n);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "n: missing");
  }
}

}  // namespace
}  // namespace saturn
