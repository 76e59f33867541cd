// A model per GPU, on a GPU-less machine: a fake device backend provider
// (registered in this test binary only) reports two devices with different
// free memory and runs models on CPU backends, recording which device each
// backend was made for. The daemon must place each load where the request
// or the free memory says, report it in the model's and the server's
// status, refuse a device that does not exist with the list of those that
// do, and serve models on both devices at once.
#include <atomic>
#include <chrono>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/minfer_client.h"
#include "daemon/daemon.h"
#include "daemon/serving/memory.h"
#include "engine/base/thread_pool.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/runtime/device_backend.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/test_util.h"
#include "tests/support/test_models.h"

namespace minfer::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ClientFor;
using testing::TextRequest;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kTotal = 8192 * kMiB;

// The fake devices' free bytes (device 1 starts with more room) and the
// devices backends were made for, in order.
struct FakeDevices {
  std::mutex mu;
  uint64_t free[2] = {3000 * kMiB, 5000 * kMiB};
  std::vector<int32_t> created;
  std::atomic<int32_t> fail_device{-1};  // its backends' MatMuls fail
  std::string fault[2];                   // DeviceInfo::fault
};
FakeDevices& Fake() {
  static FakeDevices* f = new FakeDevices;
  return *f;
}

// The fake devices' collective: the ranks are CPU backends, so a host
// collective of the split's size stands in for NCCL.
class FakeCollective : public runtime::DeviceCollective {
 public:
  explicit FakeCollective(int n) : host(n) {}
  int size() const override { return host.size(); }
  void Abort() override {
    aborts++;
    host.Abort();
  }
  bool aborted() const override { return aborts.load() > 0; }
  graph::InProcessCollective host;
  std::atomic<int> aborts{0};
};

// A fake device's backend: the CPU's, whose MatMuls fail while
// FakeDevices::fail_device names its device (a rank that fails mid-step).
class FakeDeviceBackend : public cpu::CpuBackend {
 public:
  explicit FakeDeviceBackend(int32_t device)
      : cpu::CpuBackend(&DefaultThreadPool()), device_(device) {}
  absl::Status ExecuteNode(const graph::Node& node, const graph::ExecArgs& args) override {
    if (node.op == graph::OpKind::kMatMul && Fake().fail_device.load() == device_) {
      return absl::InternalError(absl::StrCat("injected failure on fake device ", device_));
    }
    return cpu::CpuBackend::ExecuteNode(node, args);
  }

 private:
  const int32_t device_;
};

const bool kFakeRegistered = [] {
  runtime::DeviceBackendProvider p;
  p.name = "cuda";
  p.devices = []() -> absl::StatusOr<std::vector<runtime::DeviceInfo>> {
    std::lock_guard<std::mutex> lock(Fake().mu);
    return std::vector<runtime::DeviceInfo>{
        {0, "FakeGPU-A", 7, kTotal, Fake().free[0], Fake().fault[0]},
        {1, "FakeGPU-B", 9, kTotal, Fake().free[1], Fake().fault[1]}};
  };
  p.weight_bytes = [](int32_t, int, int64_t, int64_t, uint64_t file_bytes, const KnobOverrides*) {
    return file_bytes;
  };
  p.create = [](const runtime::DeviceBackendRequest& req)
      -> absl::StatusOr<std::unique_ptr<graph::Backend>> {
    std::lock_guard<std::mutex> lock(Fake().mu);
    Fake().created.push_back(req.device);
    auto b = std::make_unique<FakeDeviceBackend>(req.device);
    if (req.collective != nullptr) {
      b->SetCollective(&static_cast<FakeCollective&>(*req.collective).host, req.tp_rank);
    }
    return std::unique_ptr<graph::Backend>(std::move(b));
  };
  p.make_collective = [](const std::vector<int32_t>& devices)
      -> absl::StatusOr<std::shared_ptr<runtime::DeviceCollective>> {
    for (int32_t d : devices) {
      if (d < 0 || d > 1) return absl::InvalidArgumentError(absl::StrCat("no device ", d));
    }
    return std::make_shared<FakeCollective>(static_cast<int>(devices.size()));
  };
  runtime::RegisterDeviceBackendProvider(std::move(p));
  return true;
}();

class MultiDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kFakeRegistered);
    {
      std::lock_guard<std::mutex> lock(Fake().mu);
      Fake().free[0] = 3000 * kMiB;
      Fake().free[1] = 5000 * kMiB;
      Fake().created.clear();
      Fake().fail_device = -1;
      Fake().fault[0].clear();
      Fake().fault[1].clear();
    }
    auto a = minfer::testing::TestModelPath("tiny-untied", "q8_0", 1);
    ASSERT_TRUE(a.ok()) << a.status();
    path_ = *a;
    auto d = Daemon::Start(testing::TestConfig());
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = std::move(*d);
    client_ = ClientFor(*daemon_);
  }

  // The test model on the fake GPUs (device -1: placed by the daemon;
  // tensor_parallel > 1: a split).
  v1::LoadModelRequest Request(const std::string& name, int32_t device,
                               int32_t tensor_parallel = 1) {
    v1::LoadModelRequest r;
    r.set_name(name);
    r.set_path(path_);
    r.set_backend("cuda");
    r.set_parallel(2);
    r.set_n_ctx(256);
    if (device >= 0) r.set_device(device);
    if (tensor_parallel > 1) r.set_tensor_parallel(tensor_parallel);
    return r;
  }
  absl::StatusOr<v1::ModelStatus> Load(const std::string& name, int32_t device) {
    return client_->LoadModel(Request(name, device));
  }

  std::vector<int32_t> Created() {
    std::lock_guard<std::mutex> lock(Fake().mu);
    return Fake().created;
  }

  std::string path_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<client::MinferClient> client_;
};

TEST_F(MultiDeviceTest, AutoPlacementTakesTheDeviceWithTheMostFreeMemory) {
  auto a = Load("a", -1);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->device(), 1);
  EXPECT_EQ(a->device_label(), "cuda:1 (FakeGPU-B)");
  // Device 0 now has more room: the next model goes there.
  {
    std::lock_guard<std::mutex> lock(Fake().mu);
    Fake().free[1] = 1000 * kMiB;
  }
  auto b = Load("b", -1);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->device(), 0);
  EXPECT_EQ(b->device_label(), "cuda:0 (FakeGPU-A)");
  EXPECT_THAT(Created(), ElementsAre(1, 0));
  // The status says the same after the load.
  auto st = client_->GetModelStatus("a");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->device(), 1);
}

TEST_F(MultiDeviceTest, ALoadThatNamesADeviceGoesThere) {
  // Device 0 has less free memory, but the request names it.
  auto a = Load("a", 0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->device(), 0);
  EXPECT_THAT(Created(), ElementsAre(0));
}

TEST_F(MultiDeviceTest, ADeviceThatDoesNotExistIsRefusedWithTheDevicesThereAre) {
  auto r = Load("a", 5);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("device 5 does not exist; this server's GPUs are 0, 1"));
  EXPECT_TRUE(Created().empty());
  // The server keeps serving loads.
  EXPECT_TRUE(Load("b", 1).ok());
}

TEST_F(MultiDeviceTest, ADeviceWithoutRoomIsRefusedAndAutoTriesTheOther) {
  {
    std::lock_guard<std::mutex> lock(Fake().mu);
    Fake().free[0] = 100 * kMiB;  // under the 512 MiB headroom
  }
  auto r = Load("a", 0);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("does not fit in the memory of cuda:0 (FakeGPU-A)"));
  // Unplaced, the same model finds device 1.
  auto b = Load("b", -1);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->device(), 1);
  // Neither device has room: the refusal names the roomiest and says so.
  {
    std::lock_guard<std::mutex> lock(Fake().mu);
    Fake().free[1] = 520 * kMiB;  // 8 MiB past the headroom: more than device 0's 0
  }
  auto c = Load("c", -1);
  ASSERT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("cuda:1 (FakeGPU-B)"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("none of the 2 devices has more room"));
}

TEST_F(MultiDeviceTest, ServerStatusListsEachDeviceWithItsModels) {
  ASSERT_TRUE(Load("x", 1).ok());
  ASSERT_TRUE(Load("y", 0).ok());
  ASSERT_TRUE(Load("z", 1).ok());
  auto s = client_->GetServerStatus();
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<const v1::Device*> gpus;
  for (const v1::Device& d : s->devices()) {
    if (d.kind() == "cuda") gpus.push_back(&d);
  }
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]->index(), 0);
  EXPECT_EQ(gpus[0]->name(), "FakeGPU-A");
  EXPECT_THAT(gpus[0]->models(), ElementsAre("y"));
  EXPECT_EQ(gpus[1]->index(), 1);
  EXPECT_EQ(gpus[1]->cores(), 9);
  EXPECT_THAT(gpus[1]->models(), ElementsAre("x", "z"));
  EXPECT_EQ(gpus[0]->memory_pending_bytes(), 0u);  // no load in progress
  // The metrics say the same, per device.
  const std::string metrics = daemon_->metrics().Serialize();
  EXPECT_THAT(metrics, HasSubstr("minfer_device_models{device=\"cuda:0\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("minfer_device_models{device=\"cuda:1\"} 2"));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("minfer_device_memory_bytes{device=\"cuda:1\",kind=\"free\"} ",
                                              5000 * kMiB)));
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("minfer_device_memory_bytes{device=\"cuda:0\",kind=\"total\"} ",
                                              kTotal)));
  EXPECT_THAT(metrics, HasSubstr("minfer_device_memory_bytes{device=\"cuda:0\",kind=\"pending\"} 0"));
  // Unloaded, a model leaves its device's list.
  v1::UnloadModelRequest u;
  u.set_name("x");
  ASSERT_TRUE(client_->UnloadModel(u).ok());
  s = client_->GetServerStatus();
  ASSERT_TRUE(s.ok());
  for (const v1::Device& d : s->devices()) {
    if (d.kind() == "cuda" && d.index() == 1) EXPECT_THAT(d.models(), ElementsAre("z"));
  }
}

TEST_F(MultiDeviceTest, ModelsOnBothDevicesServeAtOnceAndEqualTheirAloneRuns) {
  ASSERT_TRUE(Load("a", 0).ok());
  ASSERT_TRUE(Load("b", 1).ok());
  // Alone runs (one model at a time) first, then both at once.
  auto alone_a = client_->Generate(TextRequest("a", "Once upon a time", 24));
  auto alone_b = client_->Generate(TextRequest("b", "The quick brown fox", 24));
  ASSERT_TRUE(alone_a.ok()) << alone_a.status();
  ASSERT_TRUE(alone_b.ok()) << alone_b.status();
  ASSERT_EQ(alone_a->token_ids.size(), 24u);
  absl::StatusOr<client::GenerateResult> both_a, both_b;
  std::thread ta([&] {
    auto c = ClientFor(*daemon_);
    both_a = c->Generate(TextRequest("a", "Once upon a time", 24));
  });
  std::thread tb([&] {
    auto c = ClientFor(*daemon_);
    both_b = c->Generate(TextRequest("b", "The quick brown fox", 24));
  });
  ta.join();
  tb.join();
  ASSERT_TRUE(both_a.ok()) << both_a.status();
  ASSERT_TRUE(both_b.ok()) << both_b.status();
  EXPECT_EQ(both_a->token_ids, alone_a->token_ids);
  EXPECT_EQ(both_b->token_ids, alone_b->token_ids);
}

// The total of the first refusal figure "... = X MiB (N B), but" in a
// RESOURCE_EXHAUSTED message (what the model or rank needs).
uint64_t NeededBytes(const std::string& message) {
  std::smatch m;
  static const std::regex kTotal(R"(= [0-9.]+ MiB \(([0-9]+) B\), but)");
  EXPECT_TRUE(std::regex_search(message, m, kTotal)) << message;
  return m.empty() ? 0 : std::stoull(m[1].str());
}

// Tensor parallelism through the admin API: each rank's share (its half of
// the split matrices and of the KV pool, the replicated tensors, the step's
// activations) is reserved on its device, so a model that fits on neither
// device alone loads across both; it is listed on both, serves, and gives
// the whole model's tokens.
TEST_F(MultiDeviceTest, ASplitThatFitsOnNeitherDeviceAloneLoadsAcrossBoth) {
  auto request = [&](const std::string& name, int32_t tp) {
    v1::LoadModelRequest r = Request(name, -1, tp);
    r.set_parallel(8);
    r.set_n_ctx(2048);
    (*r.mutable_knobs())["MINFER_BATCH_TOKENS"] = "16";  // the KV pool dominates
    return r;
  };
  auto set_free = [&](uint64_t bytes) {
    std::lock_guard<std::mutex> lock(Fake().mu);
    Fake().free[0] = Fake().free[1] = bytes;
  };
  set_free(DeviceBudget::kHeadroom + kMiB);
  auto whole = client_->LoadModel(request("whole", 1));
  ASSERT_EQ(whole.status().code(), absl::StatusCode::kResourceExhausted) << whole.status();
  const uint64_t whole_need = NeededBytes(std::string(whole.status().message()));
  auto split = client_->LoadModel(request("split", 2));
  ASSERT_EQ(split.status().code(), absl::StatusCode::kResourceExhausted) << split.status();
  EXPECT_THAT(split.status().message(), HasSubstr("tensor parallel 2: "));
  EXPECT_THAT(split.status().message(), HasSubstr("cuda:0 (FakeGPU-A)"));
  EXPECT_THAT(split.status().message(), HasSubstr("cuda:1 (FakeGPU-B)"));
  const uint64_t rank_need = NeededBytes(std::string(split.status().message()));
  ASSERT_GT(whole_need, 0u);
  EXPECT_LT(rank_need, whole_need * 3 / 4) << "a rank holds about half";
  // Room for a rank on each device, not for the whole model on either.
  set_free(DeviceBudget::kHeadroom + (rank_need + whole_need) / 2);
  whole = client_->LoadModel(request("whole", 1));
  ASSERT_EQ(whole.status().code(), absl::StatusCode::kResourceExhausted) << whole.status();
  EXPECT_THAT(whole.status().message(), HasSubstr("none of the 2 devices has more room"));
  Fake().created.clear();
  split = client_->LoadModel(request("split", 2));
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->tensor_parallel(), 2);
  EXPECT_THAT(split->devices(), ElementsAre(0, 1));
  EXPECT_EQ(split->device(), 0);
  EXPECT_THAT(split->device_label(), HasSubstr("+ cuda:1 (FakeGPU-B) (tensor parallel 2)"));
  EXPECT_THAT(Created(), ElementsAre(0, 1));
  auto s = client_->GetServerStatus();
  ASSERT_TRUE(s.ok()) << s.status();
  int listed = 0;
  for (const v1::Device& d : s->devices()) {
    if (d.kind() == "cuda") listed += d.models_size() == 1 && d.models(0) == "split";
  }
  EXPECT_EQ(listed, 2);
  // It serves, and gives the whole model's greedy tokens.
  set_free(kTotal);
  ASSERT_TRUE(client_->LoadModel(request("whole", 1)).ok());
  auto a = client_->Generate(TextRequest("split", "Once upon a time", 24));
  auto b = client_->Generate(TextRequest("whole", "Once upon a time", 24));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->token_ids.size(), 24u);
  EXPECT_EQ(a->token_ids, b->token_ids);
}

// Named devices go rank by rank; requests that cannot be a split are
// refused naming the problem.
TEST_F(MultiDeviceTest, ASplitOnNamedDevicesAndBadSplitRequests) {
  v1::LoadModelRequest r = Request("s", -1, 2);
  r.add_devices(1);
  r.add_devices(0);
  auto ok = client_->LoadModel(r);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(ok->devices(), ElementsAre(1, 0));
  EXPECT_EQ(ok->device(), 1);
  EXPECT_THAT(Created(), ElementsAre(1, 0));
  auto refused = [&](v1::LoadModelRequest bad, const std::string& why) {
    bad.set_name("bad");
    auto st = client_->LoadModel(bad);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << st.status();
    EXPECT_THAT(std::string(st.status().message()), HasSubstr(why));
  };
  v1::LoadModelRequest bad = r;
  bad.clear_devices();
  bad.add_devices(0);
  refused(bad, "devices names 1 GPUs for tensor_parallel 2");
  bad.add_devices(0);
  refused(bad, "devices must be distinct");
  bad = r;
  bad.set_device(0);
  refused(bad, "either device or devices");
  bad.clear_devices();
  refused(bad, "names its GPUs with devices, not device");
  bad = r;
  bad.clear_devices();
  bad.add_devices(0);
  bad.add_devices(7);
  refused(bad, "device 7 does not exist");
  bad = r;
  bad.set_name("three");
  bad.set_tensor_parallel(3);
  bad.clear_devices();
  auto three = client_->LoadModel(bad);
  ASSERT_FALSE(three.ok());
  EXPECT_THAT(std::string(three.status().message()),
              HasSubstr("tensor parallelism over 3 devices, but this server has 2"));
}

// A rank that fails mid-step aborts the split's device collective, so the
// other rank stops waiting at once (on GPUs it would wait inside its NCCL
// kernel for ever; here the fake collective's 60 s timeout would end it).
// The failure reaches the request; the split then refuses further steps
// until it is loaded again, and the daemon keeps serving.
TEST_F(MultiDeviceTest, AFailingRankAbortsTheSplitsCollective) {
  const v1::LoadModelRequest r = Request("s", -1, 2);
  ASSERT_TRUE(client_->LoadModel(r).ok());
  auto before = client_->Generate(TextRequest("s", "Once upon a time", 8));
  ASSERT_TRUE(before.ok()) << before.status();
  Fake().fail_device = 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto failed = client_->Generate(TextRequest("s", "Once upon a time", 8));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("injected failure on fake device 1"));
  Fake().fail_device = -1;
  auto after = client_->Generate(TextRequest("s", "Once upon a time", 8));
  ASSERT_FALSE(after.ok()) << "an aborted split must not run";
  EXPECT_THAT(std::string(after.status().message()), HasSubstr("load the model again"));
  // Loaded again, it serves as before.
  v1::UnloadModelRequest u;
  u.set_name("s");
  ASSERT_TRUE(client_->UnloadModel(u).ok());
  ASSERT_TRUE(client_->LoadModel(r).ok());
  auto again = client_->Generate(TextRequest("s", "Once upon a time", 8));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->token_ids, before->token_ids);
}

// Health per device: a GPU whose context an error poisoned (here the fake
// device reports the fault a CudaBackend would record) is unhealthy in the
// server's status and the metrics, its models report NOT_SERVING once a
// failed step has the daemon look again, and the other GPU's model goes on
// serving and stays SERVING.
TEST_F(MultiDeviceTest, AFaultedDeviceTakesItsModelsOutOfServiceAndOnlyThose) {
  ASSERT_TRUE(Load("a", 0).ok());
  ASSERT_TRUE(Load("b", 1).ok());
  auto ha = client_->Health("b");
  ASSERT_TRUE(ha.ok()) << ha.status();
  EXPECT_EQ(*ha, grpc::health::v1::HealthCheckResponse::SERVING);
  const std::string why = "an illegal memory access was encountered (cudaErrorIllegalAddress)";
  {
    std::lock_guard<std::mutex> lock(Fake().mu);
    Fake().fault[1] = why;
  }
  Fake().fail_device = 1;  // what a poisoned context does to every step
  auto failed = client_->Generate(TextRequest("b", "Once upon a time", 8));
  ASSERT_FALSE(failed.ok());
  auto hb = client_->Health("b");
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(*hb, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  auto h0 = client_->Health("a");
  ASSERT_TRUE(h0.ok()) << h0.status();
  EXPECT_EQ(*h0, grpc::health::v1::HealthCheckResponse::SERVING);
  auto ok = client_->Generate(TextRequest("a", "Once upon a time", 8));
  ASSERT_TRUE(ok.ok()) << ok.status();
  auto s = client_->GetServerStatus();
  ASSERT_TRUE(s.ok()) << s.status();
  int checked = 0;
  for (const v1::Device& d : s->devices()) {
    if (d.kind() != "cuda") {
      EXPECT_TRUE(d.healthy());
      continue;
    }
    EXPECT_EQ(d.healthy(), d.index() == 0) << d.index();
    EXPECT_EQ(d.fault(), d.index() == 1 ? why : "");
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  const std::string metrics = daemon_->metrics().Serialize();
  EXPECT_THAT(metrics, HasSubstr("minfer_device_healthy{device=\"cuda:0\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("minfer_device_healthy{device=\"cuda:1\"} 0"));
}

}  // namespace
}  // namespace minfer::daemon
