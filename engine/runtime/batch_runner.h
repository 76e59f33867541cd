// BatchRunner: one forward pass over tokens of many sequences of a model
// (continuous batching's "run" step), on a paged KV pool.
//
// Each step evaluates the items it is given — per sequence a run of
// consecutive tokens at known positions, with the sequence's block table —
// in one graph: decode tokens of running sequences and prefill chunks of new
// ones mix freely. A token's attention reads only its own sequence, up to
// its own position; its K/V go to its block-table row. Logits come out only
// for the items that ask (their last token), and per such row the runner
// returns what the sampler needs: the argmax, the top-k candidates, or the
// whole row (RowMode), computed where the logits are (on the device for a
// GPU backend), so the host reads a few values per sequence.
//
// Graphs: one per (token bucket, output-row bucket); a step is padded up to
// its buckets (token buckets 1, 2, 4, ..., 256, then multiples of 256 up to
// max_tokens; output rows powers of two), so a GPU backend can record and
// replay each bucket's graph: all per-step data (tokens, positions, cache
// rows, block tables, tiles) are graph inputs, never baked into launches.
// Every graph's activations live in one arena per backend, sized by the
// largest graph: memory does not grow with the number of sequences or
// graphs.
//
// Numerics: a token's logits do not depend on the other tokens of its step
// beyond what the backend's kernels choose by batch size. On the CPU every
// kernel computes each token's row on its own (the matmuls quantize and dot
// per token; attention blocks its keys from row 0), so a sequence gives the
// same logits, bit for bit, alone or in any batch, and equal to a Session's
// (with MINFER_FP8_PREFILL off, the default: on, matmuls switch to FP8 by
// the step's token bucket, cpu_backend.h).
// On a GPU the matmul kernel depends on the bucket (MMVQ up to 8 tokens,
// MMQ above) and decode attention's split count on the number of tiles, so
// logits move by float rounding (see docs/design.md, "batch invariance").
//
// Attention tiles: a sequence's run is cut into tiles of up to
// kAttnTileTokens tokens, which a GPU attends together (one pass over the
// sequence's keys per tile and head). A short run over a long context — a
// prompt whose prefix came from the cache, a chat's next turn — would then
// walk that context with one CTA per head: instead, runs of at most
// MINFER_ATTN_SHORT_RUN tokens that start after position
// kShortRunMinContext become one tile per token, which the split-KV decode
// kernel spreads over the whole GPU, as far as the graph's static tile
// count leaves room. A step whose every run is one token or such a short
// run — a speculative verify step, whose runs are k + 1 tokens after the
// sequence's context — runs the token-tile graphs of a decode step (a tile
// per token, no multi-token attention launch), so every short run fits
// however few sequences the graph's tile count was sized for. On the CPU
// the tiling changes nothing (every token's row is computed alone).
//
// Allowed-token masks (constrained decoding): an item's mask restricts its
// row to the allowed ids where the row is reduced — in the TopK op, on the
// device for a GPU backend — so a constrained sequence's argmax / top-k /
// normalizer come back like any other row's, without reading its logits.
// Every batch graph has the mask input (decoder.cc says why not a variant);
// a step uploads only its masked rows' masks, packed in the order of those
// rows, and a row names its mask by index in its TopK mode value
// (graph.h), so a step without masked rows uploads and computes exactly
// what it did before masks existed.
//
// Tensor parallelism: for a model split over ranks (Model::tp_peers), the
// runner is rank 0's and holds a runner per other rank with the same
// options (the same pool size: the scheduler's block tables, made on rank
// 0's pool, index every rank's cache). Run runs the same items on every
// rank at once, one thread per other rank (their graphs meet in the
// AllReduce nodes), and returns rank 0's rows (every rank computes the
// same logits).
//
// Not thread-safe: one thread (the slot's worker) drives it and its model's
// backends.
#ifndef MINFER_ENGINE_RUNTIME_BATCH_RUNNER_H_
#define MINFER_ENGINE_RUNTIME_BATCH_RUNNER_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/graph/executor.h"
#include "engine/models/decoder.h"
#include "engine/runtime/kv_pool.h"
#include "engine/runtime/model.h"
#include "engine/sampling/sampler.h"

namespace minfer::runtime {

struct BatchRunnerOptions {
  int64_t max_tokens = 512;  // tokens per step at most (the scheduler's budget)
  int32_t max_seqs = 16;     // sequences per step at most
  // Output rows per step at most: one per sequence that completes a row,
  // plus speculative verification rows (BatchItem::extra_rows). 0:
  // max_seqs. Clamped to [max_seqs, max_tokens]; each row costs a row of
  // logits (n_vocab floats) in the largest graph's activations.
  int32_t max_rows = 0;
  int64_t n_ctx = 4096;      // tokens per sequence at most (clamped to the model's)
  int32_t kv_block = 16;     // rows per KV block (a power of two)
  // Pool size in blocks, the reserved one included; 0: enough for max_seqs
  // sequences of n_ctx.
  int64_t kv_blocks = 0;
  std::optional<graph::DType> kv_type;  // unset: the model's default
  int32_t top_k = 64;                   // candidates per row (RowMode::kTop)
};

enum class RowMode : int32_t {
  kFull = 0,    // the whole row of logits
  kArgmax = 1,  // the largest logit (ties: lowest id)
  kTop = 2,     // the top_k largest and the softmax normalizer
};

// One sequence's share of a step.
struct BatchItem {
  absl::Span<const int32_t> tokens;  // evaluated this step (>= 1)
  int64_t pos0 = 0;                  // position of tokens[0]
  absl::Span<const int32_t> blocks;  // block table: covers rows [0, pos0 + tokens.size())
  bool logits = true;                // an output row for the last token
  RowMode mode = RowMode::kArgmax;
  // Null: every id is allowed. Else the allowed-token bitmask of the output
  // row, graph::TopKMaskWords(n_vocab) words (n_vocab: the model's hparams,
  // the logits' row length), bit id % 32 of word id / 32 set = id allowed;
  // read during Run only. The row is then the constrained distribution:
  // kArgmax / kTop candidates, max and log_norm over the allowed ids only
  // (the others count as -inf), and kFull (or a row read in full, below) a
  // copy with -inf at the disallowed ids. A mask that allows no id with a
  // finite logit (none at all, say) gives a row of max -inf, returned in
  // full (all -inf), for the sampler to report as any row without a finite
  // logit.
  const uint32_t* mask = nullptr;
  // Speculative verification: output rows also for the `extra_rows` tokens
  // before the last one (each row gives the token after its own), with the
  // item's mode. Needs `logits` and extra_rows < tokens.size(); the rows go
  // to Run's `extra` (below).
  int32_t extra_rows = 0;
  // With `mask` and extra_rows > 0: the extra rows' masks, extra_rows
  // consecutive masks of graph::TopKMaskWords(n_vocab) words (a constrained
  // sequence's grammar state differs at every drafted position); read
  // during Run only. Required when `mask` is set and extra_rows > 0,
  // ignored otherwise.
  const uint32_t* extra_masks = nullptr;
};

// The output row of an item that asked for one.
struct RowResult {
  float max = 0;                       // the row's largest logit among the candidates' ids
  // log sum exp(l - max) over the candidates' ids (every id below the
  // vocabulary limit, or the mask's allowed ones) (kTop; NaN otherwise).
  double log_norm = 0;
  std::vector<TokenLogprob> top;       // (logit, id) pairs: kArgmax 1, kTop <= top_k
  // kFull, or any row whose max is not finite (the sampler then reports
  // it): n_vocab floats, valid until the next Run.
  const float* logits = nullptr;
};

struct BatchRunnerStats {
  int64_t steps = 0;
  int64_t tokens = 0;         // real tokens evaluated
  int64_t padded_tokens = 0;  // including bucket padding
  int64_t graph_builds = 0;
  int64_t full_rows = 0;      // whole rows read back
  int64_t masked_rows = 0;    // rows reduced over a mask on the backend (kArgmax / kTop)
  // Steps whose backend masks were filled while the forward ran (Run's
  // fill_masks with masked rows).
  int64_t late_mask_steps = 0;
  // Tokens of short runs over earlier context attended as one-token tiles
  // (MINFER_ATTN_SHORT_RUN).
  int64_t short_run_tokens = 0;
  // Steps of decode tokens and short runs only, which run their own graphs
  // (one token per attention tile; speculative verify steps among them).
  int64_t decode_only_steps = 0;
};

class BatchRunner {
 public:
  static absl::StatusOr<std::unique_ptr<BatchRunner>> Create(std::shared_ptr<const Model> model,
                                                             const BatchRunnerOptions& options);
  ~BatchRunner();

  // Evaluates `items` (at most max_seqs, at most max_tokens tokens in all)
  // and fills results[i] for each item that asked for logits (others are
  // left empty). INVALID_ARGUMENT for more items or tokens than the
  // options allow. Preconditions on each item, which the engine guarantees
  // (its requests passed ValidateGenerateRequest, its scheduler sizes the
  // block tables): tokens in the vocabulary, positions within n_ctx, a block
  // table of pool blocks covering them. They are still checked, since a
  // wrong id or block would read or write outside the device buffers: a
  // violation is INTERNAL ("batch runner invariant: item i ..."), a bug in
  // the caller. On error the KV rows of this step may be partly written.
  //
  // Items with extra_rows: their extra rows go to `extra` (required then),
  // item by item in item order, each item's in token order. Output rows in
  // all (one per item with logits plus the extra ones) are at most
  // max_rows: the graphs' output buffers are sized for that many.
  //
  // `fill_masks` (optional): the masks are filled late, overlapped with the
  // forward pass. Run calls it once, after the forward has been issued to
  // the backend and before it reads any item's `mask` / `extra_masks` words
  // (graph::RunInputs::late_top_mask); the pointers themselves must be set
  // (non-null) before Run, since the rows' mask slots are assigned from
  // them, and must not change. An error from it fails the step. Called
  // exactly once per Run that gets that far (before the forward when no
  // row's mask goes to the backend: kFull rows are masked on the host).
  absl::Status Run(absl::Span<const BatchItem> items, std::vector<RowResult>* results,
                   std::vector<RowResult>* extra = nullptr,
                   const std::function<absl::Status()>& fill_masks = {});

  // Changes the token budget (graphs are rebuilt for the new buckets).
  void SetMaxTokens(int64_t max_tokens);

  // Builds the largest graph now, so the activation memory is allocated up
  // front (and reported) rather than at the first full step.
  absl::Status Prepare();

  KvPool& pool() { return *pool_; }
  const KvPool& pool() const { return *pool_; }
  const Model& model() const { return *model_; }
  const BatchRunnerOptions& options() const { return opt_; }  // effective values
  int64_t n_ctx() const { return opt_.n_ctx; }
  int32_t max_blocks() const { return max_blocks_; }
  // Activation bytes the arenas hold, over all backends.
  int64_t activation_bytes() const;
  const BatchRunnerStats& stats() const { return stats_; }

  // The token bucket a step of n tokens is padded to, and the output-row
  // bucket for r rows in it.
  int64_t TokenBucket(int64_t n) const;
  static int64_t RowBucket(int64_t rows, int64_t token_bucket);

 private:
  BatchRunner() = default;
  struct Cached {
    models::BatchGraphParams params;
    std::shared_ptr<graph::Graph> graph;
    std::unique_ptr<graph::GraphExec> exec;
  };
  absl::StatusOr<Cached*> GetGraph(int64_t n_tokens, int64_t n_out, bool decode_only = false);
  // Run on this rank alone.
  absl::Status RunRank(absl::Span<const BatchItem> items, std::vector<RowResult>* results,
                       std::vector<RowResult>* extra,
                       const std::function<absl::Status()>& fill_masks = {});
  models::BatchGraphParams Params(int64_t n_tokens, int64_t n_out, bool decode_only) const;

  std::shared_ptr<const Model> model_;
  BatchRunnerOptions opt_;
  int32_t max_blocks_ = 0;
  int32_t max_rows_granted_ = 0;  // options().max_rows as Create clamped it
  std::unique_ptr<KvPool> pool_;
  std::vector<std::unique_ptr<graph::ActivationArena>> arenas_;
  std::list<Cached> graphs_;  // most recently used first
  uint64_t knob_gen_ = 0;
  BatchRunnerStats stats_;
  // Per-step host staging (reused).
  std::vector<int32_t> tokens_, positions_, kv_rows_, tiles_, tables_, out_rows_, top_mode_;
  std::vector<float> top_host_, full_host_;
  std::vector<uint32_t> masks_;  // the step's masks, packed by mask index
  std::vector<const uint32_t*> mask_src_;  // where each packed mask comes from
  // The other ranks of a split model (empty otherwise), and their rows.
  std::vector<std::unique_ptr<BatchRunner>> peers_;
  std::vector<std::vector<RowResult>> peer_rows_, peer_extra_;
};

}  // namespace minfer::runtime

#endif  // MINFER_ENGINE_RUNTIME_BATCH_RUNNER_H_
