#include "engine/runtime/session.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::runtime {
namespace {
// Prefill graphs of distinct lengths kept per session (the decode graph and
// the full-chunk graph are the common ones).
constexpr size_t kMaxCachedGraphs = 4;
}  // namespace

absl::StatusOr<std::unique_ptr<Session>> Session::Create(std::shared_ptr<const Model> model,
                                                         const SessionOptions& options) {
  if (options.n_ctx <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("n_ctx must be positive, got ", options.n_ctx));
  }
  std::unique_ptr<Session> s(new Session);
  s->model_ = std::move(model);
  const auto& hp = s->model_->hparams();
  s->n_ctx_ = std::min(options.n_ctx, hp.context_length);
  graph::KvLayout layout;
  layout.dtype = options.kv_type.value_or(s->model_->DefaultKvType());
  layout.n_ctx = s->n_ctx_;
  layout.n_kv_embd = hp.n_embd_kv();
  graph::Backend* kvb = s->model_->kv_backend();
  if (!kvb->SupportsKvType(layout.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("KV type ", graph::DTypeName(layout.dtype),
                                                   " is not supported by backend ", kvb->name()));
  }
  if (layout.dtype == graph::DType::kQ8_0 && layout.n_kv_embd % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV type q8_0 needs n_kv_embd % 32 == 0, got ",
                                                   layout.n_kv_embd));
  }
  ASSIGN_OR_RETURN(s->kv_, graph::KvCache::Create(kvb, static_cast<int>(hp.n_layer), layout));
  s->knob_gen_ = KnobRegistry::Global().generation() + s->model_->knob_generation();
  return s;
}

int64_t Session::graph_bytes() const {
  int64_t total = 0;
  for (const CachedGraph& c : graphs_) {
    for (graph::Backend* b : model_->backends()) total += c.exec->activation_bytes(b);
  }
  return total;
}

absl::StatusOr<graph::GraphExec*> Session::GetGraph(int64_t n_tokens, int64_t n_out) {
  KnobRegistry& knobs = KnobRegistry::Global();
  // Both counters only grow, so their sum moves whenever either does.
  const uint64_t gen = knobs.generation() + model_->knob_generation();
  if (gen != knob_gen_) {
    graphs_.clear();  // a knob that shapes graphs may have changed
    knob_gen_ = gen;
  }
  models::GraphParams p;
  p.n_tokens = n_tokens;
  p.n_out = n_out;
  p.n_ctx = n_ctx_;
  p.kv_type = kv_->layout().dtype;
  p.fuse_qkv = !knobs.GetBool("MINFER_NO_FUSE_QKV", &model_->knobs());
  p.fuse_ffn = !knobs.GetBool("MINFER_NO_FUSE_FFN", &model_->knobs());
  p.fuse_qkv_prefill = !knobs.GetBool("MINFER_NO_FUSE_QKV_PREFILL", &model_->knobs());
  p.gpu = model_->gpu();
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->params == p) {
      graphs_.splice(graphs_.begin(), graphs_, it);
      return graphs_.front().exec.get();
    }
  }
  ASSIGN_OR_RETURN(graph::Graph g, models::BuildDecoderGraph(model_->arch(), p));
  CachedGraph c;
  c.params = p;
  c.graph = std::make_shared<graph::Graph>(std::move(g));
  ASSIGN_OR_RETURN(c.exec, graph::GraphExec::Create(c.graph, model_->backends(), kv_.get()));
  stats_.graph_builds++;
  graphs_.push_front(std::move(c));
  while (graphs_.size() > kMaxCachedGraphs) graphs_.pop_back();
  return graphs_.front().exec.get();
}

absl::Status Session::Step(absl::Span<const int32_t> tokens, bool all_logits,
                           std::vector<float>* out) {
  const int64_t nt = static_cast<int64_t>(tokens.size());
  const int64_t n_out = all_logits ? nt : 1;
  ASSIGN_OR_RETURN(graph::GraphExec * exec, GetGraph(nt, n_out));
  positions_.resize(nt);
  for (int64_t i = 0; i < nt; ++i) positions_[i] = static_cast<int32_t>(n_past_ + i);
  rows_.resize(n_out);
  for (int64_t i = 0; i < n_out; ++i) rows_[i] = static_cast<int32_t>(nt - n_out + i);
  graph::RunInputs in{tokens, positions_, rows_};
  RETURN_IF_ERROR(exec->Run(in, out));
  n_past_ += nt;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Session::Eval(absl::Span<const int32_t> tokens,
                                                 bool all_logits) {
  if (tokens.empty()) return absl::InvalidArgumentError("Eval: no tokens");
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n_past_ + n > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("context is full: ", n_past_, " tokens held + ", n,
                                              " new exceed n_ctx ", n_ctx_));
  }
  const int64_t n_vocab = model_->hparams().n_vocab;
  for (int32_t t : tokens) {
    if (t < 0 || t >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", t, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  const int64_t chunk = PrefillChunk(
      KnobRegistry::Global().GetInt("MINFER_PREFILL_CHUNK", &model_->knobs()), model_->gpu());
  const int64_t start = n_past_;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits, part;
  for (int64_t off = 0; off < n; off += chunk) {
    const int64_t len = std::min(chunk, n - off);
    absl::Status s = Step(tokens.subspan(off, len), all_logits, &part);
    if (!s.ok()) {
      n_past_ = start;
      return s;
    }
    if (all_logits) {
      logits.insert(logits.end(), part.begin(), part.end());
    } else if (off + len == n) {
      logits.swap(part);
    }
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
