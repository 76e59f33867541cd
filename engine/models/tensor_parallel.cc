// DecoderModel::Shard: one rank's part of a tensor-parallel split
// (decoder.h). Megatron's layout: in a layer, the q/k/v projections and the
// FFN's gate/up are split by output rows (each rank computes its heads and
// its part of the FFN width from the full input), the attention output and
// the FFN's down projection by input columns (each rank's partial sum over
// its heads or its FFN slice), and one all-reduce after each of those two
// sums the partials (blocks.cc inserts it). A GGUF weight [K, N] stores N
// rows of K elements, so a row range is a contiguous view and a column range
// is the same K-range of every row: contiguous whole blocks when K / size
// is a multiple of the type's block size.
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/models/decoder.h"

namespace minfer::models {

using graph::Weight;

namespace {

// The split of one model's weights into a shard's.
class Splitter {
 public:
  Splitter(int rank, int size, std::vector<std::unique_ptr<Weight>>* weights,
           std::vector<std::vector<uint8_t>>* owned)
      : rank_(rank), size_(size), weights_(weights), owned_(owned) {}

  // The same bytes under the same name (norms, embedding, head).
  const Weight* Replicated(const Weight* w) {
    if (w == nullptr) return nullptr;
    auto it = done_.find(w);
    if (it != done_.end()) return it->second;
    auto c = std::make_unique<Weight>(*w);
    return Keep(w, std::move(c));
  }

  // Rows [rank * N / size, (rank + 1) * N / size) of a [K, N] weight, or
  // elements of a 1-D f32 [N] vector.
  const Weight* Rows(const Weight* w) {
    if (w == nullptr) return nullptr;
    auto c = std::make_unique<Weight>(*w);
    if (w->dims.size() == 1) {
      const int64_t n = w->dims[0] / size_;
      c->dims = {n};
      c->data = w->data + rank_ * n * static_cast<int64_t>(sizeof(float));
      c->nbytes = static_cast<uint64_t>(n) * sizeof(float);
    } else {
      const int64_t n = w->dims[1] / size_;
      c->dims = {w->dims[0], n};
      c->data = w->data + rank_ * n * w->row_bytes();
      c->nbytes = static_cast<uint64_t>(n * w->row_bytes());
    }
    return Keep(w, std::move(c));
  }

  // Columns [rank * K / size, (rank + 1) * K / size) of a [K, N] weight,
  // copied (the caller checked that K / size is a whole number of blocks).
  const Weight* Columns(const Weight* w) {
    auto c = std::make_unique<Weight>(*w);
    const int64_t k = w->dims[0] / size_;
    const int64_t src_row = w->row_bytes(), dst_row = RowBytes(w->type, k);
    const int64_t rows = w->rows();
    std::vector<uint8_t>& bytes = owned_->emplace_back(static_cast<size_t>(dst_row * rows));
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(bytes.data() + r * dst_row, w->data + r * src_row + rank_ * dst_row,
                  static_cast<size_t>(dst_row));
    }
    c->dims[0] = k;
    c->data = bytes.data();
    c->nbytes = static_cast<uint64_t>(dst_row * rows);
    return Keep(w, std::move(c));
  }

 private:
  const Weight* Keep(const Weight* from, std::unique_ptr<Weight> w) {
    weights_->push_back(std::move(w));
    done_[from] = weights_->back().get();
    return weights_->back().get();
  }

  const int rank_, size_;
  std::vector<std::unique_ptr<Weight>>* weights_;
  std::vector<std::vector<uint8_t>>* owned_;
  std::unordered_map<const Weight*, const Weight*> done_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderModel>> DecoderModel::Shard(int rank, int size) const {
  const DecoderHparams& hp = hp_;
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel rank ", rank, " of ", size, " does not exist"));
  }
  if (hp.tp_size != 1) {
    return absl::InvalidArgumentError("a tensor-parallel shard cannot be split again");
  }
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", hp.arch, " model cannot be split over ", size, " GPUs: ", what));
  };
  if (hp.moe()) return bad("mixture-of-experts layers are not split yet (dense models only)");
  if (hp.n_head % size != 0) return bad(absl::StrCat("its ", hp.n_head, " attention heads"));
  if (hp.n_head_kv % size != 0) return bad(absl::StrCat("its ", hp.n_head_kv, " KV heads"));
  if (hp.n_ff % size != 0) return bad(absl::StrCat("its FFN width ", hp.n_ff));
  for (const DecoderLayer& L : layers_) {
    for (const Weight* w : {L.wo, L.w_down}) {
      const int64_t block = TraitsOf(w->type).block_size;
      if ((w->dims[0] / size) % block != 0) {
        return bad(absl::StrCat("'", w->name, "' would split its ", w->dims[0],
                                " columns into ranges of ", w->dims[0] / size,
                                ", not a whole number of its ", GgmlTypeName(w->type), " blocks of ",
                                block));
      }
    }
  }
  std::unique_ptr<DecoderModel> m(new DecoderModel);
  m->hp_ = hp;
  m->hp_.n_head = hp.n_head / size;
  m->hp_.n_head_kv = hp.n_head_kv / size;
  m->hp_.n_ff = hp.n_ff / size;
  m->hp_.tp_size = size;
  m->hp_.tp_rank = rank;
  m->spec_ = spec_;
  Splitter s(rank, size, &m->weights_, &m->owned_);
  m->token_embd_ = s.Replicated(token_embd_);
  m->output_norm_ = s.Replicated(output_norm_);
  m->output_ = s.Replicated(output_);
  m->rope_freqs_ = s.Replicated(rope_freqs_);
  for (const DecoderLayer& L : layers_) {
    DecoderLayer R;
    R.attn_norm = s.Replicated(L.attn_norm);
    R.wq = s.Rows(L.wq);
    R.wk = s.Rows(L.wk);
    R.wv = s.Rows(L.wv);
    R.bq = s.Rows(L.bq);
    R.bk = s.Rows(L.bk);
    R.bv = s.Rows(L.bv);
    R.q_norm = s.Replicated(L.q_norm);
    R.k_norm = s.Replicated(L.k_norm);
    R.wo = s.Columns(L.wo);
    R.bo = rank == 0 ? s.Replicated(L.bo) : nullptr;
    R.attn_sinks = s.Rows(L.attn_sinks);
    R.ffn_norm = s.Replicated(L.ffn_norm);
    R.w_gate = s.Rows(L.w_gate);
    R.w_up = s.Rows(L.w_up);
    R.w_down = s.Columns(L.w_down);
    m->layers_.push_back(R);
  }
  return m;
}

}  // namespace minfer::models
