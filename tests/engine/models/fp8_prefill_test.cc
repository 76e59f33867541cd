// MINFER_FP8_PREFILL on the CPU backend (the emulation of the GPU's FP8 e4m3
// prefill matmuls, engine/quant/fp8_matmul.h) on the synthetic Q8_0 models:
// the prefill's matmuls really take the FP8 path, the logits move by a
// bounded amount, and what happens to a greedy continuation is recorded.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/knobs.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/model.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"

namespace minfer {
namespace {

using runtime::Model;
using runtime::Session;

std::shared_ptr<Model> LoadModel(const std::string& shape, const std::string& fp8) {
  auto path = testing::TestModelPath(shape, "q8_0");
  EXPECT_TRUE(path.ok()) << path.status();
  if (!path.ok()) return nullptr;
  runtime::ModelOptions opt;
  opt.backend = "cpu";
  if (!fp8.empty()) opt.knobs["MINFER_FP8_PREFILL"] = fp8;
  auto m = Model::Load(*path, opt);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : nullptr;
}

int64_t Fp8Matmuls(const Model& m) {
  auto* cpu = dynamic_cast<cpu::CpuBackend*>(m.kv_backend());
  EXPECT_NE(cpu, nullptr);
  return cpu ? cpu->fp8_matmuls() : -1;
}

// A 40-token prompt (one prefill chunk: the CPU's is 512; one step padded to
// the 64-token bucket), ids inside every synthetic vocabulary.
std::vector<int32_t> Prompt() {
  std::vector<int32_t> p;
  for (int i = 0; i < 40; ++i) p.push_back((9707 + 389 * i) % 1000);
  return p;
}

std::vector<int32_t> Greedy(const std::shared_ptr<Model>& model, const std::vector<int32_t>& prompt,
                            int n) {
  auto session = Session::Create(model, {.n_ctx = 128});
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  auto logits = (*session)->Eval(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < n && logits.ok(); ++i) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin());
    out.push_back(next);
    logits = (*session)->Eval({next});
  }
  EXPECT_TRUE(logits.ok()) << logits.status();
  return out;
}

TEST(Fp8PrefillTest, KnobIsOffByDefault) {
  auto info = KnobRegistry::Global().Get("MINFER_FP8_PREFILL");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->spec.default_value, "0");
  EXPECT_EQ(info->spec.scope, KnobScope::kPerModel);
}

// The loose envelope asserted on every logit of every prompt position:
// |logit_fp8 - logit| <= kLogitBound * max |logit| over the whole prefill.
// Not derived (the per-matmul bound of fp8_matmul.h compounds through
// norms, attention and SwiGLU in ways it does not cover): about 4x the worst
// measured when this test was written, 0.0117 (tiny, tiny-untied) and
// 0.0126 (llama-tiny) over a 40-token prompt, top-1 equal at every position.
constexpr double kLogitBound = 0.05;

TEST(Fp8PrefillTest, PrefillTakesTheFp8PathWithBoundedLogitChanges) {
  const std::vector<int32_t> prompt = Prompt();
  for (const std::string shape : {"tiny", "tiny-untied", "llama-tiny"}) {
    SCOPED_TRACE(shape);
    auto exact = LoadModel(shape, "");
    auto fp8 = LoadModel(shape, "8");
    // Above the step's token count, which is the prompt's 40 padded to
    // the batch runner's bucket (64): nothing takes the FP8 path.
    auto above = LoadModel(shape, "65");
    ASSERT_NE(exact, nullptr);
    ASSERT_NE(fp8, nullptr);
    ASSERT_NE(above, nullptr);
    auto se = Session::Create(exact, {.n_ctx = 128});
    auto sf = Session::Create(fp8, {.n_ctx = 128});
    ASSERT_TRUE(se.ok() && sf.ok());
    auto le = (*se)->Eval(prompt, /*all_logits=*/true);
    auto lf = (*sf)->Eval(prompt, /*all_logits=*/true);
    ASSERT_TRUE(le.ok()) << le.status();
    ASSERT_TRUE(lf.ok()) << lf.status();
    ASSERT_EQ(le->size(), lf->size());
    auto sa = Session::Create(above, {.n_ctx = 128});
    ASSERT_TRUE(sa.ok());
    auto la = (*sa)->Eval(prompt, /*all_logits=*/true);
    ASSERT_TRUE(la.ok()) << la.status();
    EXPECT_EQ(*la, *le);  // bit for bit: below its threshold the option changes nothing
    EXPECT_EQ(Fp8Matmuls(*above), 0);

    // Every layer's q, k, v (one FusedQKV), output, gate, up and down
    // products, and the head over all 40 rows (64 padded).
    EXPECT_EQ(Fp8Matmuls(*exact), 0);
    EXPECT_EQ(Fp8Matmuls(*fp8), 7 * fp8->hparams().n_layer + 1);

    double max_logit = 0, max_diff = 0;
    for (size_t i = 0; i < le->size(); ++i) {
      max_logit = std::max(max_logit, std::fabs(static_cast<double>((*le)[i])));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>((*lf)[i]) - (*le)[i]));
    }
    const int64_t V = static_cast<int64_t>(le->size() / prompt.size());
    int top1_same = 0;
    for (size_t t = 0; t < prompt.size(); ++t) {
      auto e = le->begin() + t * V, f = lf->begin() + t * V;
      top1_same += std::max_element(e, e + V) - e == std::max_element(f, f + V) - f;
    }
    std::printf(
        "fp8 prefill %s: %lld fp8 matmuls, max |dlogit| / max |logit| = %.4f "
        "(%.4f / %.4f), top-1 equal at %d of %zu positions\n",
        shape.c_str(), static_cast<long long>(Fp8Matmuls(*fp8)), max_diff / max_logit, max_diff,
        max_logit, top1_same, prompt.size());
    EXPECT_GT(max_diff, 0.0);  // the path really changed the numbers
    EXPECT_LE(max_diff, kLogitBound * max_logit);
  }
}

TEST(Fp8PrefillTest, GreedyContinuationAfterAnFp8Prefill) {
  const std::vector<int32_t> prompt = Prompt();
  for (const std::string shape : {"tiny", "tiny-untied", "llama-tiny"}) {
    SCOPED_TRACE(shape);
    auto exact = LoadModel(shape, "");
    auto fp8 = LoadModel(shape, "8");
    ASSERT_NE(exact, nullptr);
    ASSERT_NE(fp8, nullptr);
    const std::vector<int32_t> want = Greedy(exact, prompt, 32);
    const std::vector<int32_t> got = Greedy(fp8, prompt, 32);
    ASSERT_EQ(want.size(), 32u);
    ASSERT_EQ(got.size(), 32u);
    EXPECT_GT(Fp8Matmuls(*fp8), 0);
    int same = 0;
    while (same < 32 && got[same] == want[same]) ++same;
    std::printf("fp8 prefill %s: greedy 32-token continuation equal for %d tokens\n", shape.c_str(),
                same);
    // Measured equal on all three models when this test was written. The
    // synthetic models are peaked (their top-1 margins dwarf a 1% logit
    // change), so this is weak evidence for real models, where the knob
    // stays off by default until the GPU path is measured on them.
    EXPECT_EQ(got, want);
  }
}

}  // namespace
}  // namespace minfer
