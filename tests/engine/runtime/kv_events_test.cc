// KV-cache events: the block hashes against an independent implementation
// of vLLM's sha256_cbor scheme (Python's cbor2 and hashlib, Debian's
// python3-cbor2), and the events BlockAllocator records as blocks are
// published, evicted and cleared.
#include "engine/runtime/kv_events.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "engine/runtime/kv_pool.h"
#include "nlohmann/json.hpp"
#include "tests/support/subprocess.h"

namespace minfer::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

struct Chain {
  std::string seed;
  std::string ns;
  std::vector<std::vector<int32_t>> blocks;
};

std::vector<std::vector<uint64_t>> Reference(const std::vector<Chain>& chains) {
  nlohmann::json in = nlohmann::json::array();
  for (const Chain& c : chains) in.push_back({{"seed", c.seed}, {"ns", c.ns}, {"blocks", c.blocks}});
  auto r = testing::RunCommand(
      {"/usr/bin/python3", testing::RunfilePath("tests/engine/runtime/kv_hash_reference.py"),
       in.dump()});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return {};
  EXPECT_EQ(r->exit_code, 0) << r->err;
  return nlohmann::json::parse(r->out).get<std::vector<std::vector<uint64_t>>>();
}

std::vector<uint64_t> Ours(const Chain& c) {
  KvBlockHasher h(c.seed);
  std::vector<uint64_t> out;
  BlockDigest parent{};
  for (size_t i = 0; i < c.blocks.size(); ++i) {
    parent = h.Hash(i == 0 ? nullptr : &parent, c.blocks[i], c.ns);
    out.push_back(KvBlockHasher::External(parent));
  }
  return out;
}

TEST(KvBlockHasherTest, MatchesVllmsSha256CborComputedInPython) {
  std::vector<int32_t> big;
  for (int i = 0; i < 16; ++i) big.push_back(151000 + i * 977);  // 3- and 5-byte CBOR ints
  std::vector<Chain> chains = {
      {"vllm-none-hash", "", {{1, 2, 3, 4}, {23, 24, 255, 256}, {65535, 65536, 0, 7}}},
      {"vllm-none-hash", "tenant-a", {{1, 2, 3, 4}, {23, 24, 255, 256}}},
      {"0", "", {big, big}},
      {"vllm-none-hash", "", {big}},
  };
  const auto want = Reference(chains);
  ASSERT_EQ(want.size(), chains.size());
  for (size_t i = 0; i < chains.size(); ++i) {
    EXPECT_THAT(Ours(chains[i]), ElementsAreArray(want[i])) << "chain " << i;
  }
  // The namespace changes the first block and so the whole chain.
  EXPECT_NE(Ours(chains[0])[1], Ours(chains[1])[1]);
}

std::vector<int32_t> Ids(int n, int start) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

TEST(BlockAllocatorEventsTest, StoredEvictedAndClearedBlocksAreAnnounced) {
  KvBlockHasher hasher;
  BlockAllocator a(5, 1);  // 4 blocks of 4 tokens
  a.RecordEvents(&hasher);
  const std::vector<int32_t> t = Ids(12, 100);
  std::vector<int32_t> b;
  ASSERT_TRUE(a.Allocate(3, &b));
  for (int j = 0; j < 3; ++j) {
    a.Publish(b[j], j == 0 ? BlockAllocator::kNoParent : b[j - 1], 7,
              absl::MakeConstSpan(t).subspan(j * 4, 4));
  }
  const std::vector<uint64_t> h = Ours({"vllm-none-hash", "", {Ids(4, 100), Ids(4, 104), Ids(4, 108)}});
  std::vector<KvEvent> ev;
  a.TakeEvents(&ev);
  // One chain published in one go: one event, the prompt's blocks in order.
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, KvEvent::Type::kBlockStored);
  EXPECT_THAT(ev[0].block_hashes, ElementsAreArray(h));
  EXPECT_FALSE(ev[0].parent_block_hash.has_value());
  EXPECT_THAT(ev[0].token_ids, ElementsAreArray(t));
  ev.clear();
  a.TakeEvents(&ev);
  EXPECT_TRUE(ev.empty());  // taken once

  // Released, then two blocks needed: the fresh one and the least recently
  // released cached block (b[0]) is evicted.
  a.Free({b[0]});
  a.Free({b[1], b[2]});
  std::vector<int32_t> x;
  ASSERT_TRUE(a.Allocate(2, &x));
  a.TakeEvents(&ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, KvEvent::Type::kBlockRemoved);
  EXPECT_THAT(ev[0].block_hashes, ElementsAre(h[0]));

  // A block published under an unpublished parent is unreachable: no entry,
  // no event.
  a.Publish(x[1], b[0], 7, absl::MakeConstSpan(t).subspan(4, 4));
  EXPECT_FALSE(a.published(x[1]));
  ev.clear();
  a.TakeEvents(&ev);
  EXPECT_TRUE(ev.empty());

  // Clearing removes what is left (b[1], b[2]) in one event; the cached
  // blocks become plain free blocks.
  EXPECT_EQ(a.UnpublishAll(), 2);
  a.TakeEvents(&ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, KvEvent::Type::kBlockRemoved);
  EXPECT_THAT(ev[0].block_hashes, ::testing::UnorderedElementsAre(h[1], h[2]));
  EXPECT_EQ(a.cached(), 0);
  EXPECT_EQ(a.free(), 2);
  EXPECT_EQ(a.evictions(), 1u);
}

TEST(BlockAllocatorEventsTest, AContinuedChainNamesItsParent) {
  KvBlockHasher hasher;
  BlockAllocator a(6, 1);
  a.RecordEvents(&hasher);
  const std::vector<int32_t> t = Ids(8, 5);
  std::vector<int32_t> b;
  ASSERT_TRUE(a.Allocate(2, &b));
  a.Publish(b[0], BlockAllocator::kNoParent, 0, "ns", absl::MakeConstSpan(t).subspan(0, 4));
  std::vector<KvEvent> ev;
  a.TakeEvents(&ev);  // a step boundary
  a.Publish(b[1], b[0], 0, absl::MakeConstSpan(t).subspan(4, 4));
  a.TakeEvents(&ev);
  const std::vector<uint64_t> h = Ours({"vllm-none-hash", "ns", {Ids(4, 5), Ids(4, 9)}});
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_THAT(ev[0].block_hashes, ElementsAre(h[0]));
  EXPECT_THAT(ev[1].block_hashes, ElementsAre(h[1]));
  EXPECT_EQ(ev[1].parent_block_hash, h[0]);
  EXPECT_THAT(ev[1].token_ids, ElementsAreArray(Ids(4, 9)));
}

TEST(BlockAllocatorEventsTest, NothingIsRecordedWithoutAHasher) {
  BlockAllocator a(4, 1);
  std::vector<int32_t> b;
  ASSERT_TRUE(a.Allocate(1, &b));
  a.Publish(b[0], BlockAllocator::kNoParent, 0, Ids(4, 0));
  EXPECT_EQ(a.UnpublishAll(), 1);
  std::vector<KvEvent> ev;
  a.TakeEvents(&ev);
  EXPECT_TRUE(ev.empty());
}

}  // namespace
}  // namespace minfer::runtime
