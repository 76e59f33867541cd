// Runs requests through a fresh runtime::Engine to the end, for tests that
// compare two engines' outputs (a split model against the whole one, a GPU
// against the CPU): one drain loop instead of one per test.
#ifndef MINFER_TESTS_SUPPORT_ENGINE_DRAIN_H_
#define MINFER_TESTS_SUPPORT_ENGINE_DRAIN_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"

namespace minfer::testing {

// Creates an engine over `model` with `options`, adds `reqs` in order and
// steps it until it has no work (at most 5,000 steps). Returns request i's
// output tokens at key i. Every creation, add, step and event must succeed
// (gtest expectations; a failed step ends the run). snapshot (may be null):
// the engine's counters after the last step.
std::map<size_t, std::vector<int32_t>> DrainEngine(
    std::shared_ptr<runtime::Model> model, const runtime::EngineOptions& options,
    const std::vector<runtime::GenerateRequest>& reqs,
    runtime::EngineSnapshot* snapshot = nullptr);

}  // namespace minfer::testing

#endif  // MINFER_TESTS_SUPPORT_ENGINE_DRAIN_H_
