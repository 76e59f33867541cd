// Replays a committed fuzz corpus through a libFuzzer entry point inside a
// regular test, so every input that was once interesting (and every crash
// reproducer added to it) stays a regression test.
#ifndef MINFER_TESTS_SUPPORT_FUZZ_CORPUS_H_
#define MINFER_TESTS_SUPPORT_FUZZ_CORPUS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace minfer::testing {

using FuzzEntry = int (*)(const uint8_t* data, size_t size);

// Feeds every file under `dir` (relative to the test's runfiles root) to
// `entry`, expecting 0 for each (gtest failures name the file); fails if
// the directory is missing or holds fewer than `min_files`.
void ExpectCorpusReplays(const std::string& dir, FuzzEntry entry, size_t min_files);

}  // namespace minfer::testing

#endif  // MINFER_TESTS_SUPPORT_FUZZ_CORPUS_H_
