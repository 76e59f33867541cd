#include "engine/tools/bench_ops.h"

namespace minfer::tools {
namespace {

double Elements(const graph::Weight* w) {
  if (w == nullptr) return 0;
  double n = 1;
  for (int64_t d : w->dims) n *= static_cast<double>(d);
  return n;
}

}  // namespace

double PrefillOps(const models::DecoderModel& arch, int64_t n_tokens, int64_t depth) {
  const models::DecoderHparams& hp = arch.hparams();
  const double n = static_cast<double>(n_tokens), d = static_cast<double>(depth);
  double layer_weights = 0;
  for (const models::DecoderLayer& l : arch.layers()) {
    for (const graph::Weight* w : {l.wq, l.wk, l.wv, l.wo, l.w_gate, l.w_up, l.w_down}) {
      layer_weights += Elements(w);
    }
  }
  const double head = Elements(arch.output());
  // sum over t < n of (d + t + 1) attended rows.
  const double attended = n * d + n * (n + 1) / 2;
  const double attention = 4.0 * static_cast<double>(hp.n_layer) *
                           static_cast<double>(hp.n_head * hp.head_dim) * attended;
  return 2.0 * layer_weights * n + 2.0 * head + attention;
}

}  // namespace minfer::tools
