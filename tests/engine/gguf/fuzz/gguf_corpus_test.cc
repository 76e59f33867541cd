// Replays the committed fuzz corpus (and any crash reproducers added to it)
// through the fuzz target, so regressions fail in the regular test suite.
#include "gtest/gtest.h"
#include "tests/support/fuzz_corpus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

TEST(GgufCorpusTest, ReplaysEveryCorpusFile) {
  minfer::testing::ExpectCorpusReplays("tests/engine/gguf/fuzz/corpus", &LLVMFuzzerTestOneInput,
                                       10);
}

}  // namespace
