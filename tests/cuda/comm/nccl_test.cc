// NcclGroup (cuda/comm/nccl.h) on the GPUs there are: a one-rank group's
// all-reduce leaves the data as it is (any GPU machine), and two ranks sum
// (two GPUs), also from a captured CUDA graph. Skips without a GPU, without
// a second GPU where it needs one, and without NCCL (naming why).
#include "cuda/comm/nccl.h"

#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include "cuda/testing/gpu_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace minfer::cuda {
namespace {

using ::testing::HasSubstr;

#define REQUIRE_NCCL()                                                         \
  do {                                                                         \
    MINFER_REQUIRE_GPU();                                                      \
    if (absl::Status s = NcclAvailable(); !s.ok()) GTEST_SKIP() << s.message(); \
  } while (0)

int Devices() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// rank r's input: (r + 1) * (i % 97) - 40 at element i, exact in f32.
std::vector<float> Input(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 97) - 40);
  return v;
}

TEST(NcclTest, GroupsRefuseEmptyAndRepeatedDeviceLists) {
  EXPECT_EQ(NcclGroup::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  auto r = NcclGroup::Create({0, 0});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("distinct"));
}

TEST(NcclTest, OneRankAllReduceKeepsTheData) {
  REQUIRE_NCCL();
  auto v = NcclVersion();
  ASSERT_TRUE(v.ok()) << v.status();
  std::printf("NCCL %s\n", v->c_str());
  auto g = NcclGroup::Create({0});
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_CUDA(cudaSetDevice(0));
  const size_t n = 1 << 16;
  std::vector<float> in = Input(0, n);
  testing::DeviceBuffer<float> buf(in);
  cudaStream_t s;
  ASSERT_CUDA(cudaStreamCreate(&s));
  ASSERT_TRUE((*g)->AllReduceSum(0, buf.get(), n, NcclType::kF32, s).ok());
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_EQ(buf.ToHost(), in);
  EXPECT_FALSE((*g)->AllReduceSum(1, buf.get(), n, NcclType::kF32, s).ok());  // no rank 1
  cudaStreamDestroy(s);
}

TEST(NcclTest, TwoRanksSumInPlaceDirectAndCaptured) {
  REQUIRE_NCCL();
  if (Devices() < 2) GTEST_SKIP() << "needs two GPUs";
  auto g = NcclGroup::Create({0, 1});
  ASSERT_TRUE(g.ok()) << g.status();
  const size_t n = (1 << 20) + 3;  // not a multiple of NCCL's chunks
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = Input(0, n)[i] + Input(1, n)[i];
  for (bool captured : {false, true}) {
    std::vector<float*> bufs(2);
    std::vector<cudaStream_t> streams(2);
    for (int r = 0; r < 2; ++r) {
      ASSERT_CUDA(cudaSetDevice(r));
      ASSERT_CUDA(cudaMalloc(&bufs[r], n * sizeof(float)));
      std::vector<float> in = Input(r, n);
      ASSERT_CUDA(cudaMemcpy(bufs[r], in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
      ASSERT_CUDA(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
    }
    // One thread per rank, in lock-step, as tensor parallelism drives them.
    std::vector<absl::Status> st(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        cudaSetDevice(r);
        if (!captured) {
          st[r] = (*g)->AllReduceSum(r, bufs[r], n, NcclType::kF32, streams[r]);
          return;
        }
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaStreamBeginCapture(streams[r], cudaStreamCaptureModeThreadLocal);
        st[r] = (*g)->AllReduceSum(r, bufs[r], n, NcclType::kF32, streams[r]);
        cudaStreamEndCapture(streams[r], &graph);
        if (st[r].ok() && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
          cudaGraphLaunch(exec, streams[r]);
          cudaStreamSynchronize(streams[r]);
          cudaGraphExecDestroy(exec);
        }
        cudaGraphDestroy(graph);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r];
      ASSERT_CUDA(cudaSetDevice(r));
      ASSERT_CUDA(cudaStreamSynchronize(streams[r]));
      std::vector<float> got(n);
      ASSERT_CUDA(cudaMemcpy(got.data(), bufs[r], n * sizeof(float), cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, want) << "rank " << r << (captured ? " (captured)" : "");
      cudaFree(bufs[r]);
      cudaStreamDestroy(streams[r]);
    }
  }
}

}  // namespace
}  // namespace minfer::cuda
