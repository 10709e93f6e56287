// Internal: thin RAII over the HDF5 C API (hid_t handles), error-stack capture, and typed
// attribute I/O. One thread calls HDF5 (it is not thread-safe in this build).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace saturn::ckpt::h5 {

// Owns one hid_t; closes it with the matching H5?close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  ~Handle() { reset(); }
  // Closes now; returns false (and captures nothing) when the close failed.
  bool reset() noexcept;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  explicit operator bool() const { return valid(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

Handle file(hid_t id);
Handle group(hid_t id);
Handle dataset(hid_t id);
Handle space(hid_t id);
Handle type(hid_t id);
Handle plist(hid_t id);
Handle attr(hid_t id);

// Silences HDF5's automatic error printing while alive (we report errors ourselves) and
// restores the previous handler afterwards.
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The innermost messages of the current HDF5 error stack ("" when empty), then clears it.
std::string take_error();

// Attribute helpers on an object (file root, dataset). Writers are collective in parallel HDF5:
// every rank must call them with identical values. Readers throw std::runtime_error with the
// attribute name on failure.
void write_string_attr(hid_t obj, const char* name, const std::string& value);
void write_int_attr(hid_t obj, const char* name, std::int64_t value);
void write_u64_attr(hid_t obj, const char* name, std::uint64_t value);
bool has_attr(hid_t obj, const char* name);
std::string read_string_attr(hid_t obj, const char* name);
std::int64_t read_int_attr(hid_t obj, const char* name);
std::uint64_t read_u64_attr(hid_t obj, const char* name);

// Names of the links in a group, in name order.
std::vector<std::string> list_group(hid_t group);

}  // namespace saturn::ckpt::h5
