#include "runtime/parallel/param_store.hpp"

namespace saturn::parallel {

ParamStore::ParamStore(Device& device, std::size_t n, const char* tag)
    : device_(&device), master_(device.memory(), n, tag) {
  device.zero(master_.data(), master_.bytes());
  const BackendTraits& t = device.traits();
  if (t.separate_weights()) {
    weights_ = Buffer<std::byte>(device.memory(), n * dtype_size(t.weights), tag);
    device.zero(weights_.data(), weights_.bytes());
  }
}

void* ParamStore::weights() {
  return weights_.empty() ? static_cast<void*>(master_.data()) : weights_.data();
}

void* ParamStore::weights_at(std::size_t element) {
  if (weights_.empty()) return master_.data() + element;
  return advance(weights_.data(), device_->traits().weights, element);
}

void ParamStore::refresh(std::size_t begin, std::size_t n) {
  if (weights_.empty() || n == 0) return;
  device_->to_weights(weights_at(begin), master_.data() + begin, n);
}

std::size_t ParamStore::bytes(const BackendTraits& traits, std::size_t n) {
  return traits.footprint(n * sizeof(float)) +
         (traits.separate_weights() ? traits.footprint(n * dtype_size(traits.weights)) : 0);
}

}  // namespace saturn::parallel
