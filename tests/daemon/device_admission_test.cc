// GPU memory admission and device reporting, on a GPU-less machine: a fake
// device backend provider (registered in this test binary only) reports a
// small device and refuses to run models, so the test sees exactly what the
// daemon decides before any upload.
#include <string>

#include "client/minfer_client.h"
#include "daemon/daemon.h"
#include "daemon/serving/memory.h"
#include "engine/models/decoder.h"
#include "engine/runtime/device_backend.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::testing::HasSubstr;
using testing::ClientFor;
using testing::TextRequest;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kDeviceTotal = 1024 * kMiB;
constexpr uint64_t kDeviceFree = 600 * kMiB;  // 88 MiB usable after the headroom

const bool kFakeRegistered = [] {
  runtime::DeviceBackendProvider p;
  p.name = "cuda";
  p.devices = []() -> absl::StatusOr<std::vector<runtime::DeviceInfo>> {
    return std::vector<runtime::DeviceInfo>{{0, "FakeGPU", 7, kDeviceTotal, kDeviceFree}};
  };
  p.weight_bytes = [](int32_t, int, int64_t, int64_t, uint64_t file_bytes, const KnobOverrides*) {
    return 2 * file_bytes;
  };
  p.create = [](const runtime::DeviceBackendRequest&)
      -> absl::StatusOr<std::unique_ptr<graph::Backend>> {
    return absl::UnavailableError("the fake device runs no models");
  };
  runtime::RegisterDeviceBackendProvider(std::move(p));
  return true;
}();

class DeviceAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kFakeRegistered);
    auto a = minfer::testing::TestModelPath("tiny", "q8_0", 1);
    ASSERT_TRUE(a.ok()) << a.status();
    path_ = *a;
    auto d = Daemon::Start(testing::TestConfig());
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = ClientFor(*daemon_);
  }

  v1::LoadModelRequest Request(const std::string& name, const std::string& backend,
                               int32_t parallel, int64_t n_ctx) {
    v1::LoadModelRequest r;
    r.set_name(name);
    r.set_path(path_);
    r.set_backend(backend);
    r.set_parallel(parallel);
    r.set_n_ctx(n_ctx);
    r.set_kv_type("f32");
    return r;
  }

  std::string path_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<client::MinferClient> client_;
};

TEST_F(DeviceAdmissionTest, CudaThatDoesNotFitIsRefusedWithTheFigures) {
  // 8 x 4096 f32 KV = 64 MiB plus the activations of 2,048-token batched
  // steps (the device default) > 88 MiB usable.
  auto r = client_->LoadModel(Request("big", "cuda", 8, 4096));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  const std::string msg(r.status().message());
  EXPECT_THAT(msg, HasSubstr("model 'big' does not fit in the memory of cuda:0 (FakeGPU)"));
  // Weights in the device layout (the provider doubles them).
  auto file = gguf::GgufFile::Open(path_);
  ASSERT_TRUE(file.ok());
  uint64_t weights = 0;
  for (const auto& t : (*file)->tensors()) weights += 2 * t.nbytes;
  EXPECT_THAT(msg, HasSubstr(absl::StrCat("(", weights, " B) + KV")));
  EXPECT_THAT(msg, HasSubstr("600.0 MiB"));
  EXPECT_THAT(msg, HasSubstr("leaving 88.0 MiB"));

  // With a draft model, the device is asked for both models' weights in its
  // layout (and both KV pools); the refusal names the draft.
  auto draft = minfer::testing::TestModelPath("tiny", "q4_0", 1);
  ASSERT_TRUE(draft.ok()) << draft.status();
  v1::LoadModelRequest with_draft = Request("drafted", "cuda", 8, 4096);
  with_draft.set_draft(*draft);
  auto d = client_->LoadModel(with_draft);
  ASSERT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted) << d.status();
  auto draft_file = gguf::GgufFile::Open(*draft);
  ASSERT_TRUE(draft_file.ok());
  uint64_t both = weights;
  for (const auto& t : (*draft_file)->tensors()) both += 2 * t.nbytes;
  const std::string dmsg(d.status().message());
  EXPECT_THAT(dmsg, HasSubstr("model 'drafted' does not fit in the memory of cuda:0 (FakeGPU)"));
  EXPECT_THAT(dmsg, HasSubstr(absl::StrCat("(", both, " B) + KV")));
  EXPECT_THAT(dmsg, HasSubstr(absl::StrCat("with draft '", *draft, "'")));
}

TEST_F(DeviceAdmissionTest, AutoThatDoesNotFitRunsOnTheCpu) {
  auto r = testing::Load(*client_, "big", path_, 4, 4096);  // backend "auto"
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->backend(), "cpu");
  auto out = client_->Generate(TextRequest("big", "still serves", 4));
  ASSERT_TRUE(out.ok()) << out.status();
}

TEST_F(DeviceAdmissionTest, CudaThatFitsReachesTheDeviceAndReleasesItsReservation) {
  // Fits the device budget, so the load reaches the provider (which fails
  // it); the reservation ends with the load, so the same figures fit again.
  for (const char* name : {"a", "b"}) {
    v1::LoadModelRequest req = Request(name, "cuda", 1, 256);
    // Graph scratch at 512-token prefill steps (the device default, 2,048,
    // needs more than the fake device's 88 MiB).
    (*req.mutable_knobs())["MINFER_PREFILL_CHUNK"] = "512";
    auto r = client_->LoadModel(req);
    // The engine's UNAVAILABLE becomes FAILED_PRECONDITION: the API keeps
    // UNAVAILABLE (retryable) for a draining server.
    ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("the fake device runs no models"));
  }
}

// The device's graphs are those of its token budget (2,048 tokens per
// batched step by default), not the CPU's 512: the scratch the refusal
// names is the estimate at 2,048.
TEST_F(DeviceAdmissionTest, DeviceEstimateUsesTheDeviceTokenBudget) {
  // 64 MiB of KV + weights + activations: over the 88 MiB usable with the
  // device's 2,048-token steps, under it with the CPU's 512.
  auto r = client_->LoadModel(Request("c", "cuda", 8, 4096));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  auto file = gguf::GgufFile::Open(path_);
  ASSERT_TRUE(file.ok());
  auto arch = models::DecoderModel::FromGguf(**file);
  ASSERT_TRUE(arch.ok());
  EstimateParams ep;
  ep.n_ctx = 4096;
  ep.parallel = 8;
  ep.kv_type = graph::DType::kF32;
  ep.token_budget = 2048;
  const uint64_t scratch = EstimateMemory(**file, (*arch)->hparams(), ep).scratch;
  ep.token_budget = 512;
  const MemoryEstimate cpu_steps = EstimateMemory(**file, (*arch)->hparams(), ep);
  EXPECT_GT(scratch, cpu_steps.scratch);
  EXPECT_LT(cpu_steps.total() - cpu_steps.weights + 2 * cpu_steps.weights, 88 * kMiB);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr(absl::StrCat("(", scratch, " B) =")));
}

TEST_F(DeviceAdmissionTest, ServerStatusListsTheDevice) {
  auto s = client_->GetServerStatus();
  ASSERT_TRUE(s.ok()) << s.status();
  bool found = false;
  for (const v1::Device& d : s->devices()) {
    if (d.kind() != "cuda") continue;
    found = true;
    EXPECT_EQ(d.name(), "FakeGPU");
    EXPECT_EQ(d.index(), 0);
    EXPECT_EQ(d.cores(), 7);
    EXPECT_EQ(d.memory_total_bytes(), kDeviceTotal);
    EXPECT_EQ(d.memory_free_bytes(), kDeviceFree);
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(s->devices(0).kind(), "cpu");
}

}  // namespace
}  // namespace minfer::daemon
