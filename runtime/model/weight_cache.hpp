// Canonical initial weights kept in memory for a while: the trials of one job shape at several
// sizes on a rank generate its weights once (generate_canonical_weights, model.hpp).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace saturn {

// While one exists (at most one per process), generate_canonical_weights keeps what it generates,
// up to `max_bytes` in all, and serves a model and seed it kept from memory, with the same values.
// saved_s() is what generating the weights it served took when it kept them: a trial adds that
// back to its set-up time, which prices the start of a segment, which generates them.
class CanonicalWeightCache {
 public:
  explicit CanonicalWeightCache(std::size_t max_bytes);  // Error when another one exists
  ~CanonicalWeightCache();
  CanonicalWeightCache(const CanonicalWeightCache&) = delete;
  CanonicalWeightCache& operator=(const CanonicalWeightCache&) = delete;

  double saved_s() const;
  static CanonicalWeightCache* active();  // null when none exists

  // generate_canonical_weights' side.
  struct Kept {
    std::vector<std::vector<float>> tensors;  // in layout order
    double seconds = 0;                       // generating them took
  };
  // The weights kept under `key` (their generation time counts in saved_s), or null.
  const Kept* find(const std::string& key);
  bool fits(std::size_t bytes) const;  // in what is left of max_bytes
  void keep(const std::string& key, Kept kept, std::size_t bytes);

 private:
  mutable std::mutex mutex_;
  std::map<std::string, Kept> kept_;  // never erased while the cache lives: find's result stays
  std::size_t max_bytes_ = 0, bytes_ = 0;
  double saved_s_ = 0;
};

}  // namespace saturn
