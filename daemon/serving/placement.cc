#include "daemon/serving/placement.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace minfer::daemon {

absl::StatusOr<std::vector<runtime::DeviceInfo>> PlacementOrder(
    const std::vector<runtime::DeviceInfo>& devices, int32_t requested,
    const DeviceBudget& budget) {
  if (requested >= 0) {
    for (const runtime::DeviceInfo& d : devices) {
      if (d.index == requested) return std::vector<runtime::DeviceInfo>{d};
    }
    std::vector<std::string> have;
    for (const runtime::DeviceInfo& d : devices) have.push_back(absl::StrCat(d.index));
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", requested, " does not exist; this server's GPUs are ",
        have.empty() ? std::string("none") : absl::StrJoin(have, ", ")));
  }
  std::vector<runtime::DeviceInfo> order = devices;
  std::stable_sort(order.begin(), order.end(),
                   [&budget](const runtime::DeviceInfo& a, const runtime::DeviceInfo& b) {
                     return budget.Usable(a.index, a.free_bytes) >
                            budget.Usable(b.index, b.free_bytes);
                   });
  return order;
}

std::string DeviceLabel(const std::string& provider, const runtime::DeviceInfo& device) {
  return absl::StrCat(provider, ":", device.index, " (", device.name, ")");
}

}  // namespace minfer::daemon
