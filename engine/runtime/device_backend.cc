#include "engine/runtime/device_backend.h"

#include <mutex>

namespace minfer::runtime {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<DeviceBackendProvider> providers;
};

Registry& Get() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

void RegisterDeviceBackendProvider(DeviceBackendProvider provider) {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  r.providers.push_back(std::move(provider));
}

std::vector<DeviceBackendProvider> DeviceBackendProviders() {
  Registry& r = Get();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.providers;
}

}  // namespace minfer::runtime
