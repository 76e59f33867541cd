// The built-in knobs. Each entry is a switch some module actually reads;
// add a knob here in the same change that makes it do something.
#include "engine/base/knobs.h"

namespace minfer {

void RegisterBuiltinKnobs(KnobRegistry& r) {
  auto add = [&r](KnobSpec s) { (void)r.Register(std::move(s)); };
  add({"MINFER_THREADS", KnobType::kInt, "0", KnobScope::kGlobal, KnobEffect::kRestart,
       "CPU worker threads for the CPU backend and model writing (0 = one per core)."});
  add({"MINFER_POOL_SPIN_US", KnobType::kInt, "200", KnobScope::kGlobal, KnobEffect::kRestart,
       "Microseconds an idle CPU worker thread polls for the next parallel job before it "
       "sleeps (0 = sleep at once: saves CPU on a shared machine, costs a wake-up per node)."});
  add({"MINFER_CACHE_TYPE", KnobType::kEnum, "auto", KnobScope::kPerModel, KnobEffect::kReload,
       "KV cache element type for new sessions: auto (f32 on the CPU; f16 on a GPU when "
       "n_layers x n_kv_embd >= 8192), f32, f16, q8_0 or fp8 (e4m3 with an f16 scale per 32 "
       "values, engine/quant/fp8.h).",
       {"auto", "f32", "f16", "q8_0", "fp8"}});
  add({"MINFER_NO_FUSE_QKV", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Disable the decode QKV fusion (FusedQKV + QkvBiasRopeStore): separate q/k/v "
       "matmuls, bias adds, RoPE and KV store."});
  add({"MINFER_NO_FUSE_QKV_PREFILL", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Disable the prefill QKV fusion (FusedQKV over the q, k and v weights, one GEMM launch "
       "on a GPU, + QkvBiasRopeStore over the prompt's tokens): separate q/k/v matmuls, bias "
       "adds, RoPE and KV store."});
  add({"MINFER_NO_FUSE_RESIDUAL", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Each decoder layer's residual adds stay Add nodes instead of riding on the matmul or "
       "MoE FFN before them (GraphBuilder::AddInto: on a GPU, the decode matmul's epilogue "
       "adds the residual; the values are the same)."});
  add({"MINFER_NO_FUSE_FFN", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Disable the decode FFN fusion (FusedFFN): separate gate/up matmuls and SwiGLU."});
  // CUDA backend. Each defaults to the fast path;
  // setting it restores the simpler mechanism, so every step stays A/B-able.
  add({"MINFER_DISABLE_CUDA", KnobType::kBool, "0", KnobScope::kGlobal, KnobEffect::kRestart,
       "Never use the GPU: models load on the CPU backend."});
  add({"MINFER_GPU", KnobType::kInt, "-1", KnobScope::kGlobal, KnobEffect::kRestart,
       "CUDA device index: the one the CLI uses and the only one minferd opens and places "
       "models on (-1 = the CLI uses the highest compute capability; minferd opens every "
       "visible GPU and places each model on the one with the most free memory)."});
  add({"MINFER_NO_CUDA_GRAPH", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture, "Direct kernel launches instead of CUDA Graph capture/replay."});
  add({"MINFER_NO_PREFILL_CAPTURE", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Capture only decode-shaped graphs (repeated identical-length prefills run direct)."});
  add({"MINFER_NO_KQ_MMVQ", KnobType::kBool, "0", KnobScope::kPerModel, KnobEffect::kRecapture,
       "K-quant decode matmuls use the f32-activation kernel instead of MMVQ."});
  add({"MINFER_NO_DECODE_A_FUSE", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Decode RmsNorm does not write the int8 activation plane; MMVQ quantizes on its own."});
  add({"MINFER_NO_PINNED_READBACK", KnobType::kBool, "0", KnobScope::kGlobal,
       KnobEffect::kImmediate, "Read logits back through pageable memory."});
  add({"MINFER_NO_PREFILL_GEMM", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Prefill matmuls (nt >= 9) run the per-type decode kernels instead of the GEMM."});
  add({"MINFER_MMVQ_MIN_ELEMS", KnobType::kInt, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Decode matmuls with fewer weights (rows x k) than this whose input was not already "
       "quantized by a fused producer run the f32-activation matvec instead of quantize + MMVQ "
       "(the shape gate; 0 = always MMVQ)."});
  add({"MINFER_ATTN_FUSED_COMBINE", KnobType::kBool, "1", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Decode attention merges its KV stripes in the block that finishes a head's last stripe "
       "(one launch fewer per layer); 0 = a combine kernel after the stripes."});
  add({"MINFER_ATTN_PAGED_LONG_MIN", KnobType::kInt, "-1", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Batched (paged) decode attention: a token with at least this many visible rows takes the "
       "GQA body (each KV row read once for the query heads that share it), a shorter one the "
       "one-warp body (each query head reads the rows itself); 0 = always GQA, 512 = the "
       "single-token rule; -1 (default) = GQA for steps of 8 tiles or more, the single-token rule "
       "below (H100, 7B: B=64 +10.7% tok/s with f16 KV and +25% with fp8, B=256 +12%, B=16 "
       "+2.7%, B=4 -2.9%)."});
  add({"MINFER_ATTN_Q8", KnobType::kBool, "0", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Decode attention of up to 8 tokens also writes its output quantized for the output "
       "projection's MMVQ (one quantize launch fewer per layer). Tested on an H100 (op_kernels_test, "
       "cuda_backend_test) but off: single-stream decode did not move beyond the spread "
       "(docs/benchmarks.md, sixteenth session)."});
  add({"MINFER_ATTN_PREFILL_TC", KnobType::kBool, "1", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Prefill attention over an f16 KV cache (16+ tokens) runs the tensor-core "
       "flash-attention kernel; 0 = the CUDA-core kernel."});
  add({"MINFER_MMQ", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Prefill matmuls (nt >= 9) of quantized weights run the int8 tensor-core MMQ GEMM; "
       "0 = the f16 tensor-core GEMM (weights dequantized in its staging loop)."});
  add({"MINFER_NO_SKIP_WRITE", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Prefill RmsNorm/SwiGLU outputs read only by MMQ GEMMs are written as f32 and quantized "
       "by the GEMM, instead of written only as the GEMM's int8 activations (mode 2)."});
  add({"MINFER_MMQ_Q4K_DSC", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kReload,
       "Q4_K weights get MMQ's W_dsc plane at load: their per-32 scale and min as f32 pairs "
       "(+44% of the Q4_K bytes in VRAM), staged by the prefill GEMM instead of decoded per "
       "chunk; 0 = no plane."});
  add({"MINFER_MMQ_Q6K_EXP", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kReload,
       "Q6_K weights get MMQ's W_exp plane at load: their per-16 scales as f32 (+29% of the "
       "Q6_K bytes in VRAM), staged by the prefill GEMM instead of decoded per chunk; 0 = no "
       "plane."});
  add({"MINFER_MMQ_STREAM_K", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Prefill MMQ launches whose tiles leave the last wave of CTAs part-empty run as "
       "stream-k: the resident CTAs share the last waves' k-chunks, handing partial sums on "
       "(bit-identical results; ~8.5 MB of VRAM per model); 0 = one tile per CTA."});
  add({"MINFER_FP8_PREFILL", KnobType::kInt, "0", KnobScope::kPerModel, KnobEffect::kReload,
       "0 = off (default); N >= 2: prefill matmuls of at least N tokens with Q8_0/F16/BF16 "
       "weights run on FP8 e4m3 (per-row weight scales, per-token activation scales; "
       "engine/quant/fp8_matmul.h states the error bound); on the CPU backend this emulates "
       "the GPU path as its reference, a scalar one (a CPU prefill runs many times slower: it "
       "is for tests, not speed). The count is a step's, padded to its graph bucket, "
       "so a large decode batch qualifies too. Read when the model loads; values below 2 are "
       "off."});
  add({"MINFER_MMQ_MIN_TOKENS", KnobType::kInt, "9", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Matmuls of at least this many tokens run the GEMM (MMQ / f16), fewer the multi-token "
       "MMVQ: 2..9 (MMVQ covers 1..8 tokens)."});
  add({"MINFER_MMQ_SMALL_TOKENS", KnobType::kInt, "32", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Quantized matmuls of MINFER_MMQ_SMALL_MIN_TOKENS up to this many tokens (a decode "
       "batch) run the few-token GEMM (every weight byte read and decoded once for all the "
       "tokens) instead of MMVQ or the tiled MMQ: 0..64; 0 = never. On the H200 it beats "
       "the tiled MMQ up to 32 tokens of the 7B (docs/benchmarks.md)."});
  add({"MINFER_MMQ_SMALL_MIN_TOKENS", KnobType::kInt, "6", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The fewest tokens a matmul needs to run the few-token GEMM rather than MMVQ: 2..64 "
       "(MMVQ's cost grows with every token, the few-token GEMM's hardly; on the H200 they "
       "cross between 4 and 8)."});
  add({"MINFER_ATTN_SHORT_RUN", KnobType::kInt, "16", KnobScope::kPerModel,
       KnobEffect::kImmediate,
       "A batched step attends a sequence's run of at most this many tokens that starts after "
       "128 positions of earlier context (a prompt whose prefix came from the prefix cache, a "
       "chat's next turn) one token per tile, on the split-KV decode kernel, instead of as one "
       "tile whose keys one CTA per head walks: 0 = never."});
  add({"MINFER_DQ_GEMM", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Q4_K / Q6_K matmuls of a decode batch (MINFER_DQ_MIN_TOKENS..MINFER_DQ_MAX_TOKENS "
       "tokens) run the dequantizing GEMM: weights decoded to f16 with their scales applied, "
       "activations the Q8 values as f16, f16 tensor cores with f32 accumulation (no "
       "per-block fold); 0 = the int8 few-token kernel / MMVQ / MMQ as before."});
  add({"MINFER_DQ_MIN_TOKENS", KnobType::kInt, "4", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The fewest tokens a Q4_K / Q6_K matmul needs to run the dequantizing GEMM rather than "
       "MMVQ: 2..64 (on the H200 it is faster from 4 tokens on every 7B shape, MMVQ at 2)."});
  add({"MINFER_DQ_MAX_TOKENS", KnobType::kInt, "64", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The most tokens a Q4_K / Q6_K matmul may have to run the dequantizing GEMM (more: the "
       "tiled MMQ): 0..64; 0 = never."});
  add({"MINFER_DQ_MT", KnobType::kInt, "0", KnobScope::kPerModel, KnobEffect::kRecapture,
       "The dequantizing GEMM's 16-row m-tiles per warp: 1 or 2; 0 = by shape (2 above 16 "
       "tokens for rows of 8192+ elements or outputs of 65536+ rows, and for 16384+ rows up to "
       "32 tokens; measured on the H200)."});
  add({"MINFER_DQW", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "On a Hopper GPU (compute capability 9.0, with the build's sm_90a code), Q4_K / Q6_K "
       "matmuls of MINFER_DQW_MIN_TOKENS..MINFER_DQW_MAX_TOKENS tokens run the wgmma "
       "dequantizing GEMM (cuda/kernels/dq_wgmma.h) instead of the DQ GEMM or MMQ; 0 = never."});
  add({"MINFER_DQW_MIN_TOKENS", KnobType::kInt, "17", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The fewest tokens a Q4_K / Q6_K matmul needs to run the wgmma DQ GEMM: 2..256 (on the "
       "H100, 7B batched decode: tied with the sm_80 DQ GEMM at B=16, +4% at B=32)."});
  add({"MINFER_DQW_MAX_TOKENS", KnobType::kInt, "256", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The most tokens a Q4_K / Q6_K matmul may have to run the wgmma DQ GEMM (more: the tiled "
       "MMQ): 0..8192; 0 = never. Above 256 (prefills) the matmul runs as launches of 256 "
       "tokens, each reading the weights again (an experiment: not measured yet)."});
  add({"MINFER_DQP_MIN_TOKENS", KnobType::kInt, "257", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "On a Hopper GPU with MINFER_DQW on, Q4_K / Q6_K matmuls of at least this many tokens (a "
       "prompt) run the warp-specialized wgmma prefill GEMM (cuda/kernels/dq_wgmma.h, "
       "LaunchDqpWgmma: weights decoded once per 128 tokens into shared memory by a producer "
       "warpgroup) in one launch, before MINFER_DQW_MAX_TOKENS and MMQ are asked: 0 = never, "
       "else 2..8192. H100, 7B Q4_K_M: pp512 9,928 (MMQ) -> 19,413 tok/s, pp2048 11,382 -> "
       "21,623; at 256 tokens the register form is still faster (the gate 91 vs 122 us)."});
  add({"MINFER_DQP_MORE_TYPES", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Q8_0 and Q5_K prompts (MINFER_DQP_MIN_TOKENS and up) run the wgmma prefill GEMM too "
       "(each weight decoded to f16 with one rounding) instead of MMQ; 0 = MMQ. H100, 7B Q8_0: "
       "pp512 10,726 / 10,875 (MMQ) -> 15,523 / 15,815 tok/s (Q5_K's speed not yet measured; "
       "its results are held to the same bound as Q8_0's)."});
  add({"MINFER_DQP_WARPGROUPS", KnobType::kInt, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Consumer warpgroups per CTA of the wgmma prefill GEMM: 2 (128 weight rows per tile of "
       "128 tokens), 4 (256 rows: the activations read once per 256 rows) or 0 = 4 for prompts of "
       "1,024 tokens and more into at most 4,096 rows (the attention output and the FFN down "
       "projection, whose activations dominate), else 2. H100, 7B Q4_K_M: 4 everywhere gives "
       "pp2048 +5% but pp512 -24% (half the CTAs of a 2-warpgroup grid, below one wave)."});
  add({"MINFER_PDL", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Kernels launch with programmatic dependent launch on compute capability 9.0+ GPUs: each "
       "grid launches while the one before it finishes and waits on the device for its result "
       "(cuda/kernels/launch.h); 0 = every launch waits for the previous kernel to end."});
  add({"MINFER_MOE_MMA", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Mixture-of-experts FFNs of MINFER_MOE_MMA_MIN_TOKENS tokens and more run their grouped "
       "expert matmuls on the int8 tensor cores (cuda/kernels/moe.h LaunchMoeMatmulMma; sm_80+, "
       "integer-dot and MXFP4 expert types); 0 = the CUDA-core grouped matmul at every size."});
  add({"MINFER_MOE_ROUTE_GROUP", KnobType::kBool, "1", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Decode MoE layers (up to 8 tokens) route and group their tokens by expert in one launch "
       "(cuda/kernels/moe.h LaunchMoeRouteGroup); 0 = a route launch, then a group launch."});
  add({"MINFER_MOE_DOWN_COMBINE", KnobType::kBool, "1", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Single-stream decode MoE layers run the experts' down projection and the weighted sum "
       "(with the residual) in one launch (cuda/kernels/moe.h LaunchMoeDownCombine); the same "
       "results bit for bit (H100, 30B-A3B tg128: +1.4%); 0 = a down launch, then a combine "
       "launch."});
  add({"MINFER_MOE_FUSED_ACT", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "MoE experts with gate/up biases or gpt-oss's clamped SwiGLU (gate and up of one type) "
       "apply the biases and the activation in the gate/up matmul's epilogue (cuda/kernels/moe.h "
       "kMoeSwiGlu), as SiLU experts without biases always do, instead of writing g and u and "
       "finishing in a launch of their own; the same results bit for bit. Off: on an H100 "
       "gpt-oss-20b's single stream lost 1.0% with it (393.8 -> 390.0 tok/s, two A/B pairs; "
       "the launch it saves costs almost nothing under PDL, the epilogue's bias loads and "
       "exponential lengthen the matmul's tail)."});
  add({"MINFER_MOE_GATE_QUANT", KnobType::kBool, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Decode MoE layers on the CUDA-core grouped matmul quantize the SwiGLU activation for the "
       "down projection in the gate/up launch (each tile's last CTA; cuda/kernels/moe.h "
       "MoeMatmulArgs::q_out) instead of a launch of their own; the same results bit for bit. Off: "
       "on an H100 it cost 3.6% on the 30B-A3B's single stream (the last CTA quantizes after "
       "the rest have finished, longer than the launch it saves)."});
  add({"MINFER_MOE_MMA_MIN_TOKENS", KnobType::kInt, "16", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The fewest tokens a MoE FFN needs for the tensor-core grouped matmul: 1..8192 (4x that "
       "where an expert type is MXFP4, whose CUDA-core decode is cheap)."});
  add({"MINFER_DQW_WARPGROUPS", KnobType::kInt, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "Warpgroups per CTA of the wgmma DQ GEMM: 1 (64 weight rows), 2 (128 rows sharing one "
       "copy of the activations) or 0 = by batch, 2 above 64 tokens (H100, 7B batched decode: "
       "2 is +4% at B=128 and +13% at B=256, even at B=32)."});
  add({"MINFER_DQW_TMA", KnobType::kInt, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "How the wgmma DQ GEMM brings its activations into shared memory (from 17 tokens): 1 = TMA "
       "boxes announced on an mbarrier (H100, 7B batched decode: B=32 +6.5%, B=64 +11.6%, "
       "B=256 +19.6% over 0); 0 = cp.async by every thread; 2 = TMA multicast over clusters of "
       "two CTAs, each bringing half of every chunk into both (half the L2 reads, but the pair "
       "waits on each other: B=64 -21%, B=256 +6% over 0). The same results bit for bit."});
  add({"MINFER_DQW_SPLIT_K", KnobType::kInt, "0", KnobScope::kPerModel, KnobEffect::kRecapture,
       "Split-k of the Hopper GEMMs (decode batches and prompts): 0 = automatic (enough splits "
       "to fill the GPU's CTA slots in whole waves); 1 = none; N = 2..16 splits (at most one "
       "per 128-element k-chunk, and as many as the workspace holds). Off with "
       "MINFER_MMQ_SPLIT_K=0."});
  add({"MINFER_GEMM_FUSE", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "The Hopper GEMMs fold their neighbours' work in: a MatMul's residual is added in the "
       "GEMM's store (or its split-k reduce) instead of an Add launch, and a decode batch's "
       "gate/up partials are summed by the SwiGLU instead of a reduce launch. The same bits; "
       "0 = the separate launches."});
  add({"MINFER_MMQ_SMALL_CHUNKS", KnobType::kInt, "2", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The staged few-token GEMM's automatic split-k keeps at least this many 256-element "
       "k-chunks per split: 1..64."});
  add({"MINFER_MMQ_SMALL_FORM", KnobType::kInt, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The few-token kernel's form: 0 = staged where the weights are 16-byte aligned (weights "
       "and activations copied into shared memory by 16-byte cp.async), else direct; 1 = "
       "direct (4-byte loads from global memory into the fragments); 2 = staged."});
  add({"MINFER_MMQ_SMALL_MT", KnobType::kInt, "0", KnobScope::kPerModel, KnobEffect::kRecapture,
       "The staged few-token kernel's 16-row m-tiles per warp: 1 or 2; 0 = 1."});
  add({"MINFER_MMQ_SMALL_STAGES", KnobType::kInt, "0", KnobScope::kPerModel,
       KnobEffect::kRecapture,
       "The staged few-token kernel's cp.async stages with one m-tile: 3 (4 CTAs per SM, at "
       "most 128 registers) or 4 (3 CTAs per SM); 0 = 3, which measured 1-5% faster on the "
       "H200."});
  add({"MINFER_MMQ_SPLIT_K", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kRecapture,
       "MMQ launches whose tiles fill at most half the resident CTA slots (the few-token "
       "GEMMs of a decode batch) split each tile's k range over several CTAs and add the "
       "partial sums in a second kernel (deterministic; float-rounding different from one "
       "CTA's fold); 0 = one CTA per tile."});
  add({"MINFER_MMQ_RAW_NB_DEBUG", KnobType::kBool, "0", KnobScope::kGlobal,
       KnobEffect::kRecapture,
       "Log which MMQ variant ran for each (weight type, shape) class the first time, and why a "
       "faster one was skipped."});
  add({"MINFER_OP_TIMING", KnobType::kBool, "0", KnobScope::kGlobal, KnobEffect::kRecapture,
       "Time every GPU op (synchronizes after each; disables graph replay); report at exit."});
  add({"MINFER_TIMING", KnobType::kBool, "0", KnobScope::kGlobal, KnobEffect::kImmediate,
       "Log the wall time of every forward (prefill or decode step)."});
  add({"MINFER_PREFILL_CHUNK", KnobType::kInt, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Prompt tokens evaluated per prefill step; 0 = by placement: 2048 on a GPU (larger "
       "GEMMs), 512 on the CPU."});
  // Continuous batching (engine/runtime/engine.h).
  add({"MINFER_BATCH_TOKENS", KnobType::kInt, "0", KnobScope::kPerModel,
       KnobEffect::kGraphRebuild,
       "Tokens per batched step (every running sequence's next token, then prefill chunks of "
       "new ones); 0 = by placement: 2048 on a GPU, 512 on the CPU. At least the model's "
       "parallel sequences."});
  add({"MINFER_SPEC_K", KnobType::kInt, "0", KnobScope::kPerModel, KnobEffect::kImmediate,
       "Speculative decoding with n-gram (prompt lookup) drafts: tokens drafted into each "
       "decode step of a greedy, unconstrained sequence and verified in the same forward "
       "(output unchanged); 0 = off. Pays where replies repeat their context (code edits, "
       "extraction, agents)."});
  add({"MINFER_SPEC_GATE", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kImmediate,
       "Speculative decoding drafts only while they pay: decode throughput with and without "
       "drafts is measured per batch size (the losing side is re-measured now and then, about "
       "1% of the time), so a busy GPU, where extra rows cost more than accepted drafts save, "
       "stops drafting."});
  add({"MINFER_LATE_MASKS", KnobType::kBool, "1", KnobScope::kPerModel, KnobEffect::kImmediate,
       "Structured outputs with masks on the device: the step's grammar masks are computed on "
       "host threads while the device runs the forward pass, and copied just before the "
       "sampling kernel reads them; 0 = computed before the forward is issued."});
  add({"MINFER_KV_BLOCK", KnobType::kInt, "16", KnobScope::kPerModel, KnobEffect::kReload,
       "Rows (tokens) per block of the paged KV pool: a power of two in [1, 4096]."});
  add({"MINFER_PREFIX_CACHE", KnobType::kBool, "1", KnobScope::kPerModel,
       KnobEffect::kImmediate,
       "Automatic prefix caching: full KV blocks stay cached after their sequence ends, and a "
       "new sequence whose prompt starts with the same tokens reuses them instead of computing "
       "them (results equal; any knob change starts a new cache generation); 0 = every "
       "prompt is computed whole."});
}

}  // namespace minfer
