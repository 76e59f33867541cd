#include "engine/runtime/session.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/base/knobs.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::runtime {

absl::StatusOr<std::unique_ptr<Session>> Session::Create(std::shared_ptr<const Model> model,
                                                         const SessionOptions& options) {
  if (options.n_ctx <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_ctx must be positive, got ", options.n_ctx));
  }
  std::unique_ptr<Session> s(new Session);
  s->model_ = std::move(model);
  const auto& hp = s->model_->hparams();
  const graph::DType kv_type = options.kv_type.value_or(s->model_->DefaultKvType());
  graph::Backend* kvb = s->model_->kv_backend();
  if (!kvb->SupportsKvType(kv_type)) {
    return absl::InvalidArgumentError(absl::StrCat("KV type ", graph::DTypeName(kv_type),
                                                   " is not supported by backend ", kvb->name()));
  }
  if ((kv_type == graph::DType::kQ8_0 || kv_type == graph::DType::kFp8) &&
      hp.n_embd_kv() % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV type ", graph::DTypeName(kv_type),
                                                   " needs n_kv_embd % 32 == 0, got ",
                                                   hp.n_embd_kv()));
  }
  KnobRegistry& knobs = KnobRegistry::Global();
  BatchRunnerOptions ro;
  ro.max_seqs = 1;
  ro.max_tokens = PrefillChunk(knobs.GetInt("MINFER_PREFILL_CHUNK", &s->model_->knobs()),
                               s->model_->gpu());
  ro.max_rows = static_cast<int32_t>(kSessionLogitRows);
  // A context of one token has no next token to predict: at least two.
  ro.n_ctx = std::max<int64_t>(std::min(options.n_ctx, hp.context_length), 2);
  ro.kv_block = static_cast<int32_t>(knobs.GetInt("MINFER_KV_BLOCK", &s->model_->knobs()));
  ro.kv_blocks = BlocksFor(ro.n_ctx, ro.kv_block) + 1;  // the one sequence, and the reserved block
  ro.kv_type = kv_type;
  ro.top_k = 1;
  ASSIGN_OR_RETURN(s->runner_, BatchRunner::Create(s->model_, ro));
  KvPool& pool = s->runner_->pool();
  if (!pool.blocks().Allocate(pool.blocks().total(), &s->blocks_)) {
    return absl::InternalError("session: the KV pool's blocks are taken");
  }
  return s;
}

const EvalStats& Session::stats() const {
  stats_.graph_builds = runner_->stats().graph_builds;
  return stats_;
}

absl::StatusOr<std::vector<float>> Session::Eval(absl::Span<const int32_t> tokens,
                                                 bool all_logits) {
  if (tokens.empty()) return absl::InvalidArgumentError("Eval: no tokens");
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n_past_ + n > n_ctx()) {
    return absl::OutOfRangeError(absl::StrCat("context is full: ", n_past_, " tokens held + ", n,
                                              " new exceed n_ctx ", n_ctx()));
  }
  const int64_t n_vocab = model_->hparams().n_vocab;
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", t, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  // The chunk knob may have changed since the last call.
  const int64_t chunk = PrefillChunk(
      KnobRegistry::Global().GetInt("MINFER_PREFILL_CHUNK", &model_->knobs()), model_->gpu());
  runner_->SetMaxTokens(chunk);
  const int64_t step_tokens =
      std::min(runner_->options().max_tokens,
               all_logits ? static_cast<int64_t>(runner_->options().max_rows) : chunk);
  const int64_t start = n_past_;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  if (all_logits) logits.reserve(static_cast<size_t>(n * n_vocab));
  for (int64_t off = 0; off < n; off += step_tokens) {
    const int64_t len = std::min(step_tokens, n - off);
    const bool last = off + len == n;
    BatchItem item;
    item.tokens = tokens.subspan(off, len);
    item.pos0 = n_past_;
    item.blocks = blocks_;
    item.logits = all_logits || last;
    item.mode = RowMode::kFull;
    item.extra_rows = all_logits ? static_cast<int32_t>(len - 1) : 0;
    absl::Status st = runner_->Run({&item, 1}, &results_, &extra_);
    if (!st.ok()) {
      n_past_ = start;
      return st;
    }
    n_past_ += len;
    if (!item.logits) continue;
    // Rows in token order: the extra rows, then the last token's.
    if (all_logits) {
      for (const RowResult& r : extra_) logits.insert(logits.end(), r.logits, r.logits + n_vocab);
    } else {
      logits.clear();
    }
    logits.insert(logits.end(), results_[0].logits, results_[0].logits + n_vocab);
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (KnobRegistry::Global().GetBool("MINFER_TIMING")) {
    Logger("runtime")->info("forward: {} tokens at position {} in {:.3f} ms ({:.1f} t/s)", n, start,
                            secs * 1e3, n / secs);
  }
  if (n == 1) {
    stats_.decode_tokens += 1;
    stats_.decode_seconds += secs;
  } else {
    stats_.prefill_tokens += n;
    stats_.prefill_seconds += secs;
  }
  return logits;
}

}  // namespace minfer::runtime
