// Work counts behind `minfer bench`'s hardware-fraction columns.
#ifndef MINFER_ENGINE_TOOLS_BENCH_OPS_H_
#define MINFER_ENGINE_TOOLS_BENCH_OPS_H_

#include <cstdint>

#include "engine/models/decoder.h"

namespace minfer::tools {

// Arithmetic operations (a multiply and an add count two) of one prefill
// of `n_tokens` tokens after `depth` tokens already in the context: every
// layer matmul once per token (2 per weight), the output head once (only
// the last token's logits are computed), and causal attention, QK^T and PV,
// 4 * n_head * head_dim per (token, attended cache row) per layer (token t
// attends depth + t + 1 rows). Elementwise ops, norms and softmax are left
// out (they are <1% of the total at these shapes). Prefill tokens/s times
// this / n_tokens is the achieved ops/s, to set against the GPU's dense
// int8 or f16 peak.
double PrefillOps(const models::DecoderModel& arch, int64_t n_tokens, int64_t depth);

}  // namespace minfer::tools

#endif  // MINFER_ENGINE_TOOLS_BENCH_OPS_H_
