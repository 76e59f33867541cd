#include "engine/runtime/model_drafter.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::runtime {

absl::Status CheckDraftVocabulary(const Model& draft, const Model& target) {
  const tokenizer::Tokenizer& d = draft.tokenizer();
  const tokenizer::Tokenizer& t = target.tokenizer();
  if (std::abs(d.vocab_size() - t.vocab_size()) > kDraftVocabSlack) {
    return absl::InvalidArgumentError(absl::StrCat(
        "draft model '", draft.name(), "' has a vocabulary of ", d.vocab_size(),
        " tokens, the target '", target.name(), "' ", t.vocab_size(),
        " (more than ", kDraftVocabSlack, " apart): a draft must share the target's tokenizer"));
  }
  for (int32_t id = 0; id < std::min(d.vocab_size(), t.vocab_size()); ++id) {
    if (d.TokenText(id) != t.TokenText(id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft model '", draft.name(), "' has token ", id, " '", absl::CEscape(d.TokenText(id)),
          "' where the target '", target.name(), "' has '", absl::CEscape(t.TokenText(id)),
          "': a draft must share the target's tokenizer"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ModelDrafter>> ModelDrafter::Create(
    std::shared_ptr<const Model> draft, const Model& target, const EngineOptions& target_options) {
  RETURN_IF_ERROR(CheckDraftVocabulary(*draft, target));
  EngineOptions o;
  o.max_seqs = target_options.max_seqs;
  o.n_ctx = target_options.n_ctx;
  o.kv_block = target_options.kv_block;
  o.kv_type = target_options.kv_type;  // unset: the draft model's default
  o.prefix_cache = true;
  o.spec_k = 0;
  auto d = std::shared_ptr<ModelDrafter>(new ModelDrafter());
  ASSIGN_OR_RETURN(d->engine_, Engine::Create(draft, o));
  d->draft_ = std::move(draft);
  d->target_vocab_ = target.tokenizer().vocab_size();
  return d;
}

int64_t ModelDrafter::Propose(absl::Span<const int32_t> tokens, int64_t k,
                              std::vector<int32_t>* out) {
  std::vector<std::vector<int32_t>> all;
  const DraftQuery q{0, tokens, k};
  ProposeAll(absl::MakeConstSpan(&q, 1), &all);
  out->insert(out->end(), all[0].begin(), all[0].end());
  return static_cast<int64_t>(all[0].size());
}

void ModelDrafter::ProposeAll(absl::Span<const DraftQuery> queries,
                              std::vector<std::vector<int32_t>>* out) {
  const auto t0 = std::chrono::steady_clock::now();
  out->resize(queries.size());
  absl::flat_hash_map<uint64_t, size_t> which;  // draft engine id -> query
  for (size_t i = 0; i < queries.size(); ++i) {
    (*out)[i].clear();
    const DraftQuery& q = queries[i];
    if (q.k <= 0 || q.tokens.empty()) continue;
    GenerateRequest r;
    r.prompt.assign(q.tokens.begin(), q.tokens.end());
    r.max_tokens = static_cast<int32_t>(q.k);
    r.ignore_eos = true;  // an end token is a draft like any other
    r.sampling.temperature = 0;
    absl::StatusOr<uint64_t> id = engine_->Add(std::move(r));
    // A sequence the draft cannot take (it does not fit the draft's pool
    // alone) simply gets no draft.
    if (id.ok()) which[*id] = i;
  }
  std::vector<EngineEvent> events;
  while (engine_->HasWork()) {
    events.clear();
    const absl::Status st = engine_->Step(&events);
    ++steps_;
    for (const EngineEvent& ev : events) {
      auto it = which.find(ev.id);
      if (it == which.end()) continue;
      std::vector<int32_t>& o = (*out)[it->second];
      o.insert(o.end(), ev.out.tokens.begin(), ev.out.tokens.end());
    }
    if (!st.ok()) {
      // The draft failed (its sequences ended with the status): the target
      // goes on without drafts this step.
      Logger("runtime")->warn("draft model step failed: {}", st.ToString());
      break;
    }
  }
  // A draft token past the target's vocabulary (a padding row the draft
  // could argmax into) ends the draft there.
  for (std::vector<int32_t>& o : *out) {
    for (size_t j = 0; j < o.size(); ++j) {
      if (o[j] < 0 || o[j] >= target_vocab_) {
        o.resize(j);
        break;
      }
    }
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace minfer::runtime
