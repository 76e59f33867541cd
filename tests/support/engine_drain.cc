#include "tests/support/engine_drain.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace minfer::testing {

std::map<size_t, std::vector<int32_t>> DrainEngine(
    std::shared_ptr<runtime::Model> model, const runtime::EngineOptions& options,
    const std::vector<runtime::GenerateRequest>& reqs, runtime::EngineSnapshot* snapshot) {
  auto e = runtime::Engine::Create(std::move(model), options);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  std::map<uint64_t, std::vector<int32_t>> out;
  std::vector<uint64_t> ids;
  for (const runtime::GenerateRequest& r : reqs) {
    auto id = (*e)->Add(r);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(id.ok() ? *id : 0);
  }
  std::vector<runtime::EngineEvent> ev;
  for (int step = 0; step < 5000 && (*e)->HasWork(); ++step) {
    ev.clear();
    const absl::Status st = (*e)->Step(&ev);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    for (const runtime::EngineEvent& x : ev) {
      EXPECT_TRUE(x.status.ok()) << x.status;
      for (int32_t t : x.out.tokens) out[x.id].push_back(t);
    }
  }
  if (snapshot != nullptr) *snapshot = (*e)->Snapshot();
  std::map<size_t, std::vector<int32_t>> by_index;
  for (size_t i = 0; i < ids.size(); ++i) by_index[i] = out[ids[i]];
  return by_index;
}

}  // namespace minfer::testing
