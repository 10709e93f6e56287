#include "runtime/checkpoint/h5.hpp"

#include <fmt/format.h>

#include <stdexcept>

namespace saturn::ckpt::h5 {

bool Handle::reset() noexcept {
  bool ok = true;
  if (id_ >= 0 && closer_) ok = closer_(id_) >= 0;
  id_ = H5I_INVALID_HID;
  return ok;
}

Handle file(hid_t id) {
  return Handle(id, H5Fclose);
}
Handle group(hid_t id) {
  return Handle(id, H5Gclose);
}
Handle dataset(hid_t id) {
  return Handle(id, H5Dclose);
}
Handle space(hid_t id) {
  return Handle(id, H5Sclose);
}
Handle type(hid_t id) {
  return Handle(id, H5Tclose);
}
Handle plist(hid_t id) {
  return Handle(id, H5Pclose);
}
Handle attr(hid_t id) {
  return Handle(id, H5Aclose);
}

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}
QuietErrors::~QuietErrors() {
  H5Eset_auto2(H5E_DEFAULT, func_, data_);
}

namespace {

herr_t collect(unsigned n, const H5E_error2_t* err, void* out) {
  auto* msgs = static_cast<std::vector<std::string>*>(out);
  (void)n;
  if (err->desc && *err->desc) msgs->emplace_back(err->desc);
  return 0;
}

}  // namespace

std::string take_error() {
  std::vector<std::string> msgs;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect, &msgs);
  H5Eclear2(H5E_DEFAULT);
  if (msgs.empty()) return "";
  // Downward walk: the API call first, the root cause last. Both help a reader.
  if (msgs.size() == 1) return msgs.front();
  return fmt::format("{} ({})", msgs.front(), msgs.back());
}

namespace {

[[noreturn]] void fail(const char* what, const char* name) {
  const std::string cause = take_error();
  throw std::runtime_error(
      fmt::format("attribute '{}': {}{}", name, what, cause.empty() ? "" : ": " + cause));
}

Handle scalar_space() {
  return space(H5Screate(H5S_SCALAR));
}

void write_attr(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* value) {
  if (H5Aexists(obj, name) > 0 && H5Adelete(obj, name) < 0) fail("cannot replace", name);
  Handle sp = scalar_space();
  Handle a = attr(H5Acreate2(obj, name, file_type, sp.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a) fail("cannot create", name);
  if (H5Awrite(a.get(), mem_type, value) < 0) fail("cannot write", name);
}

Handle vlen_utf8() {
  Handle t = type(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

}  // namespace

void write_string_attr(hid_t obj, const char* name, const std::string& value) {
  // Variable-length UTF-8: h5py returns it as a Python str.
  Handle t = vlen_utf8();
  const char* p = value.c_str();
  write_attr(obj, name, t.get(), t.get(), &p);
}

void write_int_attr(hid_t obj, const char* name, std::int64_t value) {
  write_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

void write_u64_attr(hid_t obj, const char* name, std::uint64_t value) {
  write_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

bool has_attr(hid_t obj, const char* name) {
  return H5Aexists(obj, name) > 0;
}

std::string read_string_attr(hid_t obj, const char* name) {
  Handle a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a) fail("missing", name);
  Handle ft = type(H5Aget_type(a.get()));
  if (H5Tget_class(ft.get()) != H5T_STRING) fail("is not a string", name);
  if (H5Tis_variable_str(ft.get()) > 0) {
    Handle mt = vlen_utf8();
    char* p = nullptr;
    if (H5Aread(a.get(), mt.get(), &p) < 0) fail("cannot read", name);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  // Fixed-length strings (other writers): read the bytes, drop padding.
  const std::size_t n = H5Tget_size(ft.get());
  std::string s(n, '\0');
  Handle mt = type(H5Tcopy(H5T_C_S1));
  H5Tset_size(mt.get(), n);
  if (H5Aread(a.get(), mt.get(), s.data()) < 0) fail("cannot read", name);
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

std::int64_t read_int_attr(hid_t obj, const char* name) {
  Handle a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a) fail("missing", name);
  Handle ft = type(H5Aget_type(a.get()));
  if (H5Tget_class(ft.get()) != H5T_INTEGER) fail("is not an integer", name);
  std::int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) fail("cannot read", name);
  return v;
}

std::uint64_t read_u64_attr(hid_t obj, const char* name) {
  Handle a = attr(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a) fail("missing", name);
  Handle ft = type(H5Aget_type(a.get()));
  if (H5Tget_class(ft.get()) != H5T_INTEGER) fail("is not an integer", name);
  std::uint64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_UINT64, &v) < 0) fail("cannot read", name);
  return v;
}

namespace {

herr_t add_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

}  // namespace

std::vector<std::string> list_group(hid_t group) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, add_name, &names) < 0)
    throw std::runtime_error("cannot list group: " + take_error());
  return names;
}

}  // namespace saturn::ckpt::h5
