// A fake ::minfer::runtime::StepEngine for tests of the slot's worker: one token per
// sequence per step (ids 100, 101, ...), a sequence finishing at its
// max_tokens; it records what the slot asked of it in a Shared block the
// test reads.
#ifndef MINFER_TESTS_DAEMON_SERVING_FAKE_ENGINE_H_
#define MINFER_TESTS_DAEMON_SERVING_FAKE_ENGINE_H_

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "daemon/serving/sequence.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"

namespace minfer::testing {

class FakeEngine : public ::minfer::runtime::StepEngine {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int64_t steps = 0;
    std::set<uint64_t> cancelled;
    std::map<uint64_t, int64_t> produced;
    int step_ms = 1;
  };
  explicit FakeEngine(Shared* s) : s_(s) {}

  absl::StatusOr<uint64_t> Add(::minfer::runtime::GenerateRequest r) override {
    if (r.prompt.empty()) return absl::InvalidArgumentError("prompt: no tokens");
    const uint64_t id = next_++;
    seqs_[id] = r.max_tokens;
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->produced[id] = 0;
    return id;
  }
  void Cancel(uint64_t id) override {
    seqs_.erase(id);
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->cancelled.insert(id);
  }
  absl::Status Step(std::vector<::minfer::runtime::EngineEvent>* events) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(s_->step_ms));
    std::lock_guard<std::mutex> lock(s_->mu);
    ++s_->steps;
    for (auto it = seqs_.begin(); it != seqs_.end();) {
      ::minfer::runtime::EngineEvent ev;
      ev.id = it->first;
      const int64_t n = s_->produced[it->first]++;
      ev.out.tokens = {static_cast<int32_t>(100 + n)};
      ev.out.text = "x";
      if (n + 1 >= it->second) {
        ev.finished = true;
        ev.reason = ::minfer::FinishReason::kLength;
        ev.stats.completion_tokens = static_cast<int32_t>(n + 1);
        it = seqs_.erase(it);
      } else {
        ++it;
      }
      events->push_back(std::move(ev));
    }
    s_->cv.notify_all();
    return absl::OkStatus();
  }
  ::minfer::runtime::EngineSnapshot Snapshot() const override {
    ::minfer::runtime::EngineSnapshot s;
    s.running = static_cast<int64_t>(seqs_.size());
    s.kv_block = 16;
    s.kv_blocks_total = 100;
    s.token_budget = 64;
    s.n_ctx = 256;
    return s;
  }

 private:
  Shared* s_;
  std::map<uint64_t, int64_t> seqs_;
  uint64_t next_ = 1;
};

// Drains a sequence's output until its result arrives (or 10 s), counting
// its tokens into *tokens.
inline ::minfer::daemon::SequenceResult WaitForResult(::minfer::daemon::Sequence& seq,
                                                      int64_t* tokens) {
  for (int i = 0; i < 10000; ++i) {
    ::minfer::daemon::SequenceChunk c;
    while (seq.TakeChunk(&c)) {
      *tokens += static_cast<int64_t>(c.tokens.size());
      if (c.result.has_value()) return *c.result;
      c = ::minfer::daemon::SequenceChunk{};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << "no result";
  return ::minfer::daemon::SequenceResult{};
}

}  // namespace minfer::testing

#endif  // MINFER_TESTS_DAEMON_SERVING_FAKE_ENGINE_H_
