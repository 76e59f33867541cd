#include "engine/runtime/batch_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/base/knobs.h"
#include "engine/base/logging.h"
#include "engine/base/status.h"

namespace minfer::runtime {
namespace {

// Graphs kept per runner (each bucket pair that occurred recently).
constexpr size_t kMaxGraphs = 48;
constexpr int64_t kPow2Buckets = 256;  // powers of two up to here, then multiples of it
// A short run (batch_runner.h) is attended token by token only over at
// least this much earlier context: below it the one tile costs little.
constexpr int64_t kShortRunMinContext = 128;

// -inf at the ids `mask` disallows (BatchItem::mask) of a row of n floats.
void ApplyMask(const uint32_t* mask, int64_t n, float* row) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = mask[w];
    if (bits == ~0u) continue;
    const int64_t end = std::min<int64_t>(32, n - 32 * w);
    for (int64_t b = 0; b < end; ++b) {
      if (((bits >> b) & 1u) == 0) row[32 * w + b] = kNegInf;
    }
  }
}

int64_t CeilPow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

BatchRunner::~BatchRunner() {
  // Graphs release their arena share before the arenas and the pool go.
  graphs_.clear();
  arenas_.clear();
}

int64_t BatchRunner::TokenBucket(int64_t n) const {
  int64_t b = n <= kPow2Buckets ? CeilPow2(std::max<int64_t>(n, 1))
                                : (n + kPow2Buckets - 1) / kPow2Buckets * kPow2Buckets;
  return std::min(b, opt_.max_tokens);
}

int64_t BatchRunner::RowBucket(int64_t rows, int64_t token_bucket) {
  return std::min(CeilPow2(std::max<int64_t>(rows, 1)), token_bucket);
}

absl::StatusOr<std::unique_ptr<BatchRunner>> BatchRunner::Create(
    std::shared_ptr<const Model> model, const BatchRunnerOptions& options) {
  BatchRunnerOptions o = options;
  if (o.max_tokens < 1 || o.max_seqs < 1 || o.n_ctx < 2 || o.top_k < 1 || o.top_k > 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch runner: max_tokens ", o.max_tokens, ", max_seqs ", o.max_seqs, ", n_ctx ", o.n_ctx,
        " and top_k ", o.top_k, " must be >= 1, >= 1, >= 2 and in [1, 1024]"));
  }
  if (o.kv_block < 1 || o.kv_block > 4096 || (o.kv_block & (o.kv_block - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV block size must be a power of two in [1, 4096], got ", o.kv_block));
  }
  const auto& hp = model->hparams();
  o.n_ctx = std::min(o.n_ctx, hp.context_length);
  // A step never holds more sequences than tokens.
  o.max_seqs = static_cast<int32_t>(std::min<int64_t>(o.max_seqs, o.max_tokens));
  o.max_rows = static_cast<int32_t>(
      std::clamp<int64_t>(o.max_rows > 0 ? o.max_rows : o.max_seqs, o.max_seqs, o.max_tokens));
  std::unique_ptr<BatchRunner> r(new BatchRunner);
  r->max_blocks_ = static_cast<int32_t>(BlocksFor(o.n_ctx, o.kv_block));
  if (o.kv_blocks == 0) o.kv_blocks = static_cast<int64_t>(o.max_seqs) * r->max_blocks_ + 1;
  r->model_ = std::move(model);
  r->opt_ = o;
  r->max_rows_granted_ = o.max_rows;
  const graph::DType kv_type = o.kv_type.value_or(r->model_->DefaultKvType());
  ASSIGN_OR_RETURN(r->pool_, KvPool::Create(r->model_->kv_backend(), static_cast<int>(hp.n_layer),
                                            hp.n_embd_kv(), kv_type, o.kv_block, o.kv_blocks));
  for (graph::Backend* b : r->model_->backends()) {
    r->arenas_.push_back(std::make_unique<graph::ActivationArena>(b));
  }
  r->knob_gen_ = KnobRegistry::Global().generation() + r->model_->knob_generation();
  for (const std::shared_ptr<Model>& peer : r->model_->tp_peers()) {
    BatchRunnerOptions po = options;
    po.kv_blocks = o.kv_blocks;  // the same blocks as rank 0's pool
    ASSIGN_OR_RETURN(std::unique_ptr<BatchRunner> p, Create(peer, po));
    r->peers_.push_back(std::move(p));
  }
  r->peer_rows_.resize(r->peers_.size());
  r->peer_extra_.resize(r->peers_.size());
  return r;
}

int64_t BatchRunner::activation_bytes() const {
  int64_t total = 0;
  for (const auto& a : arenas_) total += a->bytes();
  for (const auto& p : peers_) total += p->activation_bytes();
  return total;
}

models::BatchGraphParams BatchRunner::Params(int64_t n_tokens, int64_t n_out,
                                             bool decode_only) const {
  KnobRegistry& knobs = KnobRegistry::Global();
  const KnobOverrides* ov = &model_->knobs();
  models::BatchGraphParams p;
  p.n_tokens = n_tokens;
  p.n_out = n_out;
  const int64_t table_rows = std::min<int64_t>(n_tokens, opt_.max_seqs) + 1;
  p.n_table_rows = table_rows;
  // Each sequence's run splits into tiles of kAttnTileTokens; padding
  // needs its own (see Run).
  const int64_t tile = graph::kAttnTileTokens;
  p.n_tiles = std::min<int64_t>(n_tokens, (n_tokens + tile - 1) / tile + table_rows);
  // A step of decode tokens and short runs only (the steady state of
  // serving; speculative verify steps) has its own graphs: a tile per
  // token, padding included, and no multi-token attention launch.
  p.decode_only = decode_only && n_tokens > 1;
  if (p.decode_only) p.n_tiles = n_tokens;
  p.max_blocks = max_blocks_;
  p.kv_block = opt_.kv_block;
  p.cache_rows = pool_->rows();
  p.kv_type = pool_->dtype();
  p.fuse_qkv = n_tokens == 1 ? !knobs.GetBool("MINFER_NO_FUSE_QKV", ov)
                             : !knobs.GetBool("MINFER_NO_FUSE_QKV_PREFILL", ov);
  p.fuse_ffn = !knobs.GetBool("MINFER_NO_FUSE_FFN", ov);
  p.fuse_residual = !knobs.GetBool("MINFER_NO_FUSE_RESIDUAL", ov);
  p.gpu = model_->gpu();
  p.top_k = opt_.top_k;
  p.vocab_limit = static_cast<int32_t>(
      std::min<int64_t>(model_->tokenizer().vocab_size(), model_->hparams().n_vocab));
  return p;
}

absl::StatusOr<BatchRunner::Cached*> BatchRunner::GetGraph(int64_t n_tokens, int64_t n_out,
                                                           bool decode_only) {
  const uint64_t gen = KnobRegistry::Global().generation() + model_->knob_generation();
  if (gen != knob_gen_) {
    graphs_.clear();  // a knob that shapes graphs may have changed
    knob_gen_ = gen;
  }
  const models::BatchGraphParams p = Params(n_tokens, n_out, decode_only);
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->params == p) {
      graphs_.splice(graphs_.begin(), graphs_, it);
      return &graphs_.front();
    }
  }
  ASSIGN_OR_RETURN(graph::Graph g, models::BuildDecoderBatchGraph(model_->arch(), p));
  Cached c;
  c.params = p;
  c.graph = std::make_shared<graph::Graph>(std::move(g));
  std::vector<graph::ActivationArena*> arenas;
  for (const auto& a : arenas_) arenas.push_back(a.get());
  auto exec = graph::GraphExec::Create(c.graph, model_->backends(), pool_->cache(), arenas);
  if (!exec.ok() && absl::IsFailedPrecondition(exec.status())) {
    // The arena must grow: drop the graphs that hold it, then retry.
    Logger("runtime")->debug("batch runner: arena grows for {}; {} graphs dropped", p.ToString(),
                             graphs_.size());
    graphs_.clear();
    exec = graph::GraphExec::Create(c.graph, model_->backends(), pool_->cache(), arenas);
  }
  if (!exec.ok()) return exec.status();
  c.exec = std::move(*exec);
  stats_.graph_builds++;
  graphs_.push_front(std::move(c));
  while (graphs_.size() > kMaxGraphs) graphs_.pop_back();
  return &graphs_.front();
}

void BatchRunner::SetMaxTokens(int64_t max_tokens) {
  for (auto& p : peers_) p->SetMaxTokens(max_tokens);
  if (max_tokens == opt_.max_tokens || max_tokens < opt_.max_seqs) return;
  opt_.max_tokens = max_tokens;
  // Rows stay what Create granted (the activations were sized for them)
  // as far as the new budget holds them.
  opt_.max_rows = static_cast<int32_t>(std::clamp<int64_t>(max_rows_granted_, opt_.max_seqs,
                                                           max_tokens));
  graphs_.clear();
}

absl::Status BatchRunner::Prepare() {
  for (auto& p : peers_) RETURN_IF_ERROR(p->Prepare());
  const int64_t t = TokenBucket(opt_.max_tokens);
  // The largest graphs: every token a sequence of its own with an output
  // row (decode) and every speculative row, and one long prefill.
  RETURN_IF_ERROR(GetGraph(t, RowBucket(std::min<int64_t>(t, opt_.max_rows), t)).status());
  return GetGraph(t, 1).status();
}

absl::Status BatchRunner::Run(absl::Span<const BatchItem> items, std::vector<RowResult>* results,
                              std::vector<RowResult>* extra,
                              const std::function<absl::Status()>& fill_masks) {
  if (!peers_.empty()) {
    // Every rank runs the step; their AllReduce nodes meet.
    // A rank that fails aborts the collective, so the others stop waiting
    // in their next AllReduce instead of running out its timeout; once
    // every rank is back it is made usable again for the next step.
    // Ranks on devices wait inside their all-reduce kernels: their
    // collective is aborted too, for good (DeviceCollective::Abort).
    graph::InProcessCollective* collective = model_->tp_collective();
    DeviceCollective* device = model_->tp_device_collective();
    if (device != nullptr && device->aborted()) {
      return absl::FailedPreconditionError(
          "this split's device collective was aborted after a rank failed; load the model again");
    }
    auto abort = [&] {
      if (collective != nullptr) collective->Abort();
      if (device != nullptr) device->Abort();
    };
    // Every rank reads the masks: they are filled before any rank starts.
    if (fill_masks) RETURN_IF_ERROR(fill_masks());
    std::vector<absl::Status> st(peers_.size());
    std::vector<std::thread> threads;
    threads.reserve(peers_.size());
    for (size_t i = 0; i < peers_.size(); ++i) {
      threads.emplace_back([&, i] {
        st[i] = peers_[i]->RunRank(items, &peer_rows_[i], extra != nullptr ? &peer_extra_[i] : nullptr);
        if (!st[i].ok()) abort();
      });
    }
    absl::Status own = RunRank(items, results, extra);
    if (!own.ok()) abort();
    for (auto& t : threads) t.join();
    bool failed = !own.ok();
    for (const absl::Status& s : st) failed = failed || !s.ok();
    if (failed && collective != nullptr) collective->Reset();
    RETURN_IF_ERROR(own);
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (!st[i].ok()) return Annotate(st[i], absl::StrCat("tensor-parallel rank ", i + 1));
    }
    return absl::OkStatus();
  }
  return RunRank(items, results, extra, fill_masks);
}

absl::Status BatchRunner::RunRank(absl::Span<const BatchItem> items,
                                  std::vector<RowResult>* results, std::vector<RowResult>* extra,
                                  const std::function<absl::Status()>& fill_masks) {
  const int64_t n_items = static_cast<int64_t>(items.size());
  if (n_items == 0) return absl::InvalidArgumentError("batch runner: empty step");
  if (n_items > opt_.max_seqs) {
    return absl::InvalidArgumentError(absl::StrCat("batch runner: ", n_items,
                                                   " sequences in one step, at most ",
                                                   opt_.max_seqs));
  }
  const int64_t n_vocab = model_->hparams().n_vocab;
  const int64_t bs = opt_.kv_block;
  int64_t n_tokens = 0, n_rows = 0;
  for (int64_t i = 0; i < n_items; ++i) {
    const BatchItem& it = items[i];
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    if (n < 1 || it.pos0 < 0 || it.pos0 + n > opt_.n_ctx) {
      return absl::InternalError(absl::StrCat(
          "batch runner invariant: item ", i, " has ", n, " tokens at position ", it.pos0,
          " (each sequence holds at most n_ctx ", opt_.n_ctx, " tokens)"));
    }
    if (static_cast<int64_t>(it.blocks.size()) < BlocksFor(it.pos0 + n, bs) ||
        static_cast<int64_t>(it.blocks.size()) > max_blocks_) {
      return absl::InternalError(absl::StrCat(
          "batch runner invariant: item ", i, " has ", it.blocks.size(), " blocks for ", it.pos0 + n,
          " rows (blocks of ", bs, ", at most ", max_blocks_, ")"));
    }
    for (int32_t b : it.blocks) {
      if (b <= KvPool::kTrashBlock || b >= pool_->n_blocks()) {
        return absl::InternalError(absl::StrCat("batch runner invariant: item ", i, " block ", b,
                                                       " is not a block of the pool [1, ",
                                                       pool_->n_blocks(), ")"));
      }
    }
    for (int32_t t : it.tokens) {
      if (t < 0 || t >= n_vocab) {
        return absl::InternalError(absl::StrCat(
            "batch runner invariant: item ", i, ": token id ", t, " is outside the vocabulary [0, ",
            n_vocab, ")"));
      }
    }
    if (it.extra_rows != 0 &&
        (it.extra_rows < 0 || it.extra_rows >= n || !it.logits ||
         (it.mask != nullptr && it.extra_masks == nullptr) || extra == nullptr)) {
      return absl::InternalError(absl::StrCat(
          "batch runner invariant: item ", i, " asks for ", it.extra_rows, " extra rows of ", n,
          " tokens (needs logits, fewer than its tokens, masks for them if the item has one, "
          "and an extra output)"));
    }
    n_tokens += n;
    if (it.logits) n_rows += 1 + it.extra_rows;
  }
  if (n_rows > opt_.max_rows) {
    return absl::InvalidArgumentError(absl::StrCat("batch runner: ", n_rows,
                                                   " output rows in one step, at most ",
                                                   opt_.max_rows));
  }
  if (n_tokens > opt_.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("batch runner: ", n_tokens,
                                                   " tokens in one step, at most ",
                                                   opt_.max_tokens));
  }
  const int64_t T = TokenBucket(n_tokens);
  const int64_t O = RowBucket(std::max<int64_t>(n_rows, 1), T);
  const int64_t short_run = KnobRegistry::Global().GetInt("MINFER_ATTN_SHORT_RUN", &model_->knobs());
  // A run attended one token per tile when the graph has room (header).
  auto is_short_run = [&](int64_t n, int64_t pos0) {
    return n > 1 && n <= short_run && pos0 >= kShortRunMinContext;
  };
  // Every run one token or a short run: the token-tile graph, where every
  // short run fits (a graph sized by sequences has room for few).
  bool decode_only = true;
  for (int64_t i = 0; i < n_items; ++i) {
    const int64_t n = static_cast<int64_t>(items[i].tokens.size());
    decode_only = decode_only && (n == 1 || is_short_run(n, items[i].pos0));
  }
  ASSIGN_OR_RETURN(Cached * c, GetGraph(T, O, decode_only));
  const models::BatchGraphParams& p = c->params;

  tokens_.assign(T, 0);
  positions_.assign(T, 0);
  kv_rows_.assign(T, 0);  // padding writes row 0 of the reserved block
  tiles_.assign(4 * p.n_tiles, 0);
  tables_.assign(static_cast<size_t>(p.max_blocks) * p.n_table_rows, KvPool::kTrashBlock);
  out_rows_.assign(O, 0);
  top_mode_.assign(O, 0);
  const int64_t mask_words = graph::TopKMaskWords(n_vocab);
  masks_.clear();
  mask_src_.clear();
  int64_t t = 0, n_tile = 0, row = 0;
  auto tiles_for = [](int64_t n) {
    return (n + graph::kAttnTileTokens - 1) / graph::kAttnTileTokens;
  };
  // Tiles the graph holds beyond what whole tiles need: short runs may
  // spend them on one tile per token (batch_runner.h).
  int64_t spare = p.n_tiles - (n_tokens < T ? tiles_for(T - n_tokens) : 0);
  for (int64_t i = 0; i < n_items; ++i) spare -= tiles_for(static_cast<int64_t>(items[i].tokens.size()));
  auto add_tiles = [&](int64_t table_row, int64_t t0, int64_t n, int64_t pos0) {
    const bool short_tiles = is_short_run(n, pos0) && (p.decode_only || n - 1 <= spare);
    // (A token-tile graph has a tile per token, the padding's too.)
    const int64_t per_tile = p.decode_only || short_tiles ? 1 : graph::kAttnTileTokens;
    if (short_tiles) {
      if (!p.decode_only) spare -= n - 1;
      stats_.short_run_tokens += n;
    }
    for (int64_t s = 0; s < n; s += per_tile) {
      int32_t* tile = tiles_.data() + 4 * n_tile++;
      tile[0] = static_cast<int32_t>(table_row);
      tile[1] = static_cast<int32_t>(t0 + s);
      tile[2] = static_cast<int32_t>(std::min<int64_t>(per_tile, n - s));
    }
  };
  for (int64_t i = 0; i < n_items; ++i) {
    const BatchItem& it = items[i];
    std::copy(it.blocks.begin(), it.blocks.end(), tables_.begin() + i * p.max_blocks);
    const int64_t t0 = t;
    for (size_t j = 0; j < it.tokens.size(); ++j, ++t) {
      const int64_t pos = it.pos0 + static_cast<int64_t>(j);
      tokens_[t] = it.tokens[j];
      positions_[t] = static_cast<int32_t>(pos);
      kv_rows_[t] = static_cast<int32_t>(static_cast<int64_t>(it.blocks[pos / bs]) * bs + pos % bs);
    }
    add_tiles(i, t0, t - t0, it.pos0);
    if (it.logits) {
      out_rows_[row] = static_cast<int32_t>(t - 1);
      int32_t slot = -1;
      // A kFull row is masked on the host copy instead (below): its mask
      // is not uploaded.
      if (it.mask != nullptr && it.mode != RowMode::kFull) {
        slot = static_cast<int32_t>(mask_src_.size());
        mask_src_.push_back(it.mask);
      }
      top_mode_[row] = graph::TopKModeValue(static_cast<int32_t>(it.mode), slot);
      ++row;
    }
  }
  // Extra rows (speculative verification) after every item's last row, so
  // the rows above keep their places.
  const int64_t n_main = row;
  t = 0;
  for (int64_t i = 0; i < n_items; ++i) {
    const BatchItem& it = items[i];
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    for (int32_t j = 0; j < it.extra_rows; ++j, ++row) {
      out_rows_[row] = static_cast<int32_t>(t + n - 1 - it.extra_rows + j);
      int32_t slot = -1;
      if (it.mask != nullptr && it.mode != RowMode::kFull) {
        slot = static_cast<int32_t>(mask_src_.size());
        mask_src_.push_back(it.extra_masks + j * mask_words);
      }
      top_mode_[row] = graph::TopKModeValue(static_cast<int32_t>(it.mode), slot);
    }
    t += n;
  }
  t = n_tokens;
  // Padding: each token at position 0 of the reserved sequence (the last
  // table row, all entries the reserved block).
  if (t < T) add_tiles(p.n_table_rows - 1, t, T - t, 0);

  graph::RunInputs in;
  in.tokens = tokens_;
  in.positions = positions_;
  in.out_rows = out_rows_;
  in.kv_rows = kv_rows_;
  in.attn_tiles = tiles_;
  in.block_tables = tables_;
  in.top_mode = top_mode_;
  // The masked rows' masks packed in slot order (none: nothing uploaded).
  auto pack_masks = [&] {
    masks_.resize(mask_src_.size() * mask_words);
    for (size_t m = 0; m < mask_src_.size(); ++m) {
      std::copy(mask_src_[m], mask_src_[m] + mask_words, masks_.begin() + m * mask_words);
    }
  };
  if (fill_masks && !mask_src_.empty()) {
    in.late_top_mask = [&]() -> absl::StatusOr<absl::Span<const uint32_t>> {
      RETURN_IF_ERROR(fill_masks());
      pack_masks();
      stats_.late_mask_steps++;
      return absl::Span<const uint32_t>(masks_);
    };
  } else {
    if (fill_masks) RETURN_IF_ERROR(fill_masks());
    pack_masks();
    in.top_mask = masks_;
  }
  RETURN_IF_ERROR(c->exec->Run(in, nullptr));
  stats_.masked_rows += static_cast<int64_t>(mask_src_.size());
  stats_.steps++;
  if (p.decode_only) stats_.decode_only_steps++;
  stats_.tokens += n_tokens;
  stats_.padded_tokens += T;

  // Read back: the TopK rows (a few values each), then whole rows where
  // asked or where the candidates cannot be trusted (a non-finite max);
  // a masked row read whole gets its mask on the host copy, so the sampler
  // sees the constrained row on every path (an all-masked row: all -inf).
  const graph::GraphIO& io = c->graph->io;
  const int64_t stride = 2 + 2 * static_cast<int64_t>(p.top_k);
  top_host_.resize(static_cast<size_t>(n_rows) * stride);
  if (n_rows > 0) {
    RETURN_IF_ERROR(c->exec->ReadNodeRange(io.top, 0, top_host_.data(), n_rows * stride * 4));
  }
  results->assign(n_items, RowResult{});
  if (extra != nullptr) extra->assign(n_rows - n_main, RowResult{});
  int64_t n_full = 0;
  std::vector<int64_t> full_of(n_rows, -1);
  // Output row r's result, item and mask (main rows first, then extra rows).
  struct RowOf {
    RowResult* result;
    int64_t item;
    const uint32_t* mask;
  };
  std::vector<RowOf> row_of(n_rows);
  row = 0;
  for (int64_t i = 0; i < n_items; ++i) {
    if (items[i].logits) row_of[row++] = {&(*results)[i], i, items[i].mask};
  }
  for (int64_t i = 0; i < n_items; ++i) {
    const BatchItem& it = items[i];
    for (int32_t j = 0; j < it.extra_rows; ++j, ++row) {
      row_of[row] = {&(*extra)[row - n_main], i,
                     it.mask != nullptr ? it.extra_masks + j * mask_words : nullptr};
    }
  }
  for (row = 0; row < n_rows; ++row) {
    const float* tr = top_host_.data() + row * stride;
    RowResult& rr = *row_of[row].result;
    rr.max = tr[0];
    rr.log_norm = std::numeric_limits<double>::quiet_NaN();
    const RowMode mode = items[row_of[row].item].mode;
    if (mode == RowMode::kFull || !std::isfinite(tr[0])) {
      full_of[row] = n_full++;
    } else {
      if (mode == RowMode::kTop) rr.log_norm = std::log(static_cast<double>(tr[1]));
      const int64_t k = mode == RowMode::kTop ? p.top_k : 1;
      for (int64_t j = 0; j < k; ++j) {
        int32_t id;
        std::memcpy(&id, tr + 3 + 2 * j, sizeof(id));
        if (id < 0) break;
        rr.top.push_back({id, tr[2 + 2 * j]});
      }
    }
  }
  if (n_full > 0) {
    full_host_.resize(static_cast<size_t>(n_full) * n_vocab);
    for (row = 0; row < n_rows; ++row) {
      if (full_of[row] < 0) continue;
      float* dst = full_host_.data() + full_of[row] * n_vocab;
      RETURN_IF_ERROR(c->exec->ReadNodeRange(io.logits, row * n_vocab * 4, dst, n_vocab * 4));
      if (row_of[row].mask != nullptr) ApplyMask(row_of[row].mask, n_vocab, dst);
      row_of[row].result->logits = dst;
    }
    stats_.full_rows += n_full;
  }
  return absl::OkStatus();
}

}  // namespace minfer::runtime
