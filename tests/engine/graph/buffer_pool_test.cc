#include "engine/graph/buffer_pool.h"

#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

namespace minfer::graph {
namespace {

// Tracks what the pool asks its owner to allocate and free.
struct FakeMemory {
  std::vector<void*> live;
  int allocs = 0;
  BufferPool::AllocFn alloc() {
    return [this](int64_t bytes) -> absl::StatusOr<void*> {
      ++allocs;
      void* p = std::malloc(static_cast<size_t>(bytes));
      live.push_back(p);
      return p;
    };
  }
  BufferPool::FreeFn free() {
    return [this](void* p) {
      std::erase(live, p);
      std::free(p);
    };
  }
};

TEST(BufferPoolTest, ReusesOnlyExactSizeAndMovesGen) {
  FakeMemory mem;
  BufferPool pool(nullptr, "test");
  auto a = pool.Acquire(128, mem.alloc());
  ASSERT_TRUE(a.ok());
  const uint64_t g1 = pool.gen();
  pool.Release(*a);
  // A different size must not take the freed 128-byte buffer.
  auto b = pool.Acquire(64, mem.alloc());
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*b, *a);
  EXPECT_EQ(mem.allocs, 2);
  // The same size takes it back without allocating, and gen moves.
  auto c = pool.Acquire(128, mem.alloc());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *a);
  EXPECT_EQ(mem.allocs, 2);
  EXPECT_GT(pool.gen(), g1);
  EXPECT_EQ(pool.bytes(), 192);
  pool.ReleaseAll(mem.free());
  EXPECT_TRUE(mem.live.empty());
  EXPECT_EQ(pool.bytes(), 0);
}

TEST(BufferPoolTest, FreeUnusedGivesBackOnlyReleasedBuffersForGood) {
  FakeMemory mem;
  BufferPool pool(nullptr, "test");
  auto held = pool.Acquire(100, mem.alloc());
  auto gone = pool.Acquire(200, mem.alloc());
  ASSERT_TRUE(held.ok() && gone.ok());
  pool.Release(*gone);
  const uint64_t g = pool.gen();
  EXPECT_EQ(pool.FreeUnused(mem.free()), 200);
  EXPECT_EQ(mem.live.size(), 1u);  // the held one stays
  EXPECT_EQ(pool.bytes(), 100);
  EXPECT_GT(pool.gen(), g);
  EXPECT_EQ(pool.FreeUnused(mem.free()), 0);  // nothing more to free
  // Its id is not handed out again; the same size is a new allocation.
  auto again = pool.Acquire(200, mem.alloc());
  ASSERT_TRUE(again.ok());
  EXPECT_NE(*again, *gone);
  EXPECT_EQ(mem.allocs, 3);
  pool.ReleaseAll(mem.free());
  EXPECT_TRUE(mem.live.empty());
}

TEST(BufferPoolTest, ResolveChecksOwnerAndRange) {
  FakeMemory mem;
  int owner_tag = 0;
  const Backend* owner = reinterpret_cast<const Backend*>(&owner_tag);
  BufferPool pool(owner, "test");
  auto id = pool.Acquire(100, mem.alloc());
  ASSERT_TRUE(id.ok());
  BufferRef ref{const_cast<Backend*>(owner), *id, 40, 60};
  auto p = pool.Resolve(ref, 60);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, static_cast<uint8_t*>(mem.live[0]) + 40);
  auto too_far = pool.Resolve(ref, 61);
  EXPECT_EQ(too_far.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(too_far.status().message().find("exceeds buffer"), std::string_view::npos);
  BufferRef foreign{nullptr, *id, 0, 1};
  EXPECT_FALSE(pool.Resolve(foreign, 1).ok());
  BufferRef unknown{const_cast<Backend*>(owner), 7, 0, 1};
  EXPECT_FALSE(pool.Resolve(unknown, 1).ok());
  pool.ReleaseAll(mem.free());
}

TEST(BufferPoolTest, AllocationFailureIsReported) {
  BufferPool pool(nullptr, "test");
  auto r = pool.Acquire(1 << 20, [](int64_t) -> absl::StatusOr<void*> {
    return absl::ResourceExhaustedError("out of memory");
  });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.bytes(), 0);
}

}  // namespace
}  // namespace minfer::graph
