// Which GPU a model goes to (docs/design.md, a model per GPU): the device a
// load names, or the one that can give it the most memory now.
#ifndef MINFER_DAEMON_SERVING_PLACEMENT_H_
#define MINFER_DAEMON_SERVING_PLACEMENT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/serving/memory.h"
#include "engine/runtime/device_backend.h"

namespace minfer::daemon {

// The devices to try a load on, in order. `devices` is a provider's list
// (its default first). With `requested` >= 0: that device alone, or
// INVALID_ARGUMENT naming it and the devices there are. With `requested`
// -1: every device, the one with the most usable bytes first (free less
// loads in progress there and the headroom, DeviceBudget::Usable), ties in
// the provider's order; the loader reserves on the first that fits. Pure
// apart from reading `budget`.
absl::StatusOr<std::vector<runtime::DeviceInfo>> PlacementOrder(
    const std::vector<runtime::DeviceInfo>& devices, int32_t requested,
    const DeviceBudget& budget);

// "cuda:1 (NVIDIA H200)": how messages and status name a device.
std::string DeviceLabel(const std::string& provider, const runtime::DeviceInfo& device);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_SERVING_PLACEMENT_H_
