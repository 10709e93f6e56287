// Field tables (issue 29): a struct's JSON keys listed once, for writing and for reading.
//
//   constexpr auto kFields = std::make_tuple(json_fields::field("steps", &Job::steps),
//                                            json_fields::optional_field("seed", &Job::seed));
//   json_fields::write_fields(j, job, kFields);              // j["steps"] = job.steps, ...
//   json_fields::read_fields<InputError>(j, job, kFields, "job");
//
// Reading checks each value's JSON type before converting it (no silent float-to-int
// truncation) and throws E naming the field: "job.steps: expected an integer, got 1.5",
// "job.steps: missing". A table may hold any type with key, member and required (the profile
// store's also name an HDF5 attribute). Header-only on nlohmann and fmt.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

namespace saturn::json_fields {

template <class S, class T>
struct Field {
  const char* key;
  T S::*member;
  bool required = true;  // false: an absent key leaves the member as it is (its default)
};

template <class S, class T>
constexpr Field<S, T> field(const char* key, T S::*member) {
  return {key, member, true};
}
template <class S, class T>
constexpr Field<S, T> optional_field(const char* key, T S::*member) {
  return {key, member, false};
}

// What read_fields throws unless told otherwise. A json::exception, so that the handlers callers
// have for nlohmann's own errors (which add the file or record read) catch it too.
class FieldError : public nlohmann::json::exception {
 public:
  explicit FieldError(const std::string& what) : exception(0, what.c_str()) {}
};

namespace detail {

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
inline constexpr bool kAlwaysFalse = false;

// nullptr when `v` reads as a T, else what a T needs ("an integer").
template <class T, class Json>
const char* mismatch(const Json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean() ? nullptr : "true or false";
  } else if constexpr (std::is_integral_v<T>) {
    return !v.is_number() ? "a number" : !v.is_number_integer() ? "an integer" : nullptr;
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number() ? nullptr : "a number";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string() ? nullptr : "a string";
  } else if constexpr (is_vector<T>::value) {
    using U = typename T::value_type;
    const char* of = std::is_same_v<U, std::string> ? "an array of strings"
                     : std::is_integral_v<U>        ? "an array of integers"
                                                    : "an array of numbers";
    static_assert(std::is_arithmetic_v<U> || std::is_same_v<U, std::string>);
    static_assert(!std::is_same_v<U, bool>);
    if (!v.is_array()) return of;
    for (const auto& e : v)
      if (mismatch<U>(e)) return of;
    return nullptr;
  } else {
    static_assert(kAlwaysFalse<T>, "no field-table conversion for this member type");
  }
}

inline std::string name(std::string_view where, std::string_view key) {
  return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
}

}  // namespace detail

// Writes each field of `s` into the object `j` (keys it already has are replaced).
template <class Json, class S, class... F>
void write_fields(Json& j, const S& s, const std::tuple<F...>& fields) {
  std::apply([&](const auto&... f) { ((j[f.key] = s.*(f.member)), ...); }, fields);
}

template <class Json = nlohmann::json, class S, class... F>
Json object_of(const S& s, const std::tuple<F...>& fields) {
  Json j = Json::object();
  write_fields(j, s, fields);
  return j;
}

// One value: j[key] into `out`. `where` is the path of `j` for messages ("" at the top).
template <class E = FieldError, class Json, class T>
void read_value(const Json& j, std::string_view where, const char* key, T& out,
                bool required = true) {
  const auto it = j.find(key);
  if (it == j.end()) {
    if (required) throw E(fmt::format("{}: missing", detail::name(where, key)));
    return;
  }
  if (const char* need = detail::mismatch<T>(*it))
    throw E(fmt::format("{}: expected {}, got {}", detail::name(where, key), need, it->dump()));
  out = it->template get<T>();
}

// Every field of the table from the object `j` into `s`.
template <class E = FieldError, class Json, class S, class... F>
void read_fields(const Json& j, S& s, const std::tuple<F...>& fields, std::string_view where) {
  if (!j.is_object())
    throw E(where.empty() ? fmt::format("expected a JSON object, got {}", j.dump())
                          : fmt::format("{}: expected a JSON object, got {}", where, j.dump()));
  std::apply(
      [&](const auto&... f) { (read_value<E>(j, where, f.key, s.*(f.member), f.required), ...); },
      fields);
}

}  // namespace saturn::json_fields
