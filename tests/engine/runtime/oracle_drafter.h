// A drafter for tests of speculative decoding: it drafts the tokens a known
// run wrote after each prompt (what a perfect draft model would propose),
// optionally wrong at every `wrong_every`-th position, so every path of
// verification is taken — all accepted, a prefix accepted, none.
#ifndef MINFER_TESTS_ENGINE_RUNTIME_ORACLE_DRAFTER_H_
#define MINFER_TESTS_ENGINE_RUNTIME_ORACLE_DRAFTER_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/runtime/completion.h"
#include "engine/runtime/drafter.h"

namespace minfer::testing {

class OracleDrafter : public runtime::Drafter {
 public:
  // outputs[i]: the tokens a run of requests[i] produced.
  OracleDrafter(const std::vector<runtime::GenerateRequest>& requests,
                const std::vector<std::vector<int32_t>>& outputs, int wrong_every)
      : wrong_every_(wrong_every) {
    for (size_t i = 0; i < requests.size(); ++i) {
      std::vector<int32_t> all = requests[i].prompt;
      all.insert(all.end(), outputs[i].begin(), outputs[i].end());
      runs_.push_back({requests[i].prompt.size(), std::move(all)});
    }
  }
  int64_t Propose(absl::Span<const int32_t> tokens, int64_t k,
                  std::vector<int32_t>* out) override {
    for (const auto& [prompt, all] : runs_) {
      if (tokens.size() < prompt || tokens.size() >= all.size() ||
          !std::equal(all.begin(), all.begin() + tokens.size(), tokens.begin())) {
        continue;
      }
      int64_t n = 0;
      for (size_t j = tokens.size(); j < all.size() && n < k; ++j, ++n) {
        const bool wrong = wrong_every_ > 0 && (j % wrong_every_) == 0;
        out->push_back(wrong ? (all[j] + 1) % 100 : all[j]);
      }
      return n;
    }
    return 0;
  }

 private:
  int wrong_every_;
  std::vector<std::pair<size_t, std::vector<int32_t>>> runs_;
};

}  // namespace minfer::testing

#endif  // MINFER_TESTS_ENGINE_RUNTIME_ORACLE_DRAFTER_H_
