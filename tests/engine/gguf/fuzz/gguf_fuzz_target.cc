// libFuzzer entry point for the GGUF reader. Parses arbitrary bytes and, when
// they parse, touches everything a consumer would: every metadata value's
// rendering, every typed accessor, every tensor's data range.
//
// Built two ways: by scripts/fuzz_gguf.sh with clang -fsanitize=fuzzer,
// address,undefined (the fuzzer), and into gguf_corpus_test (a regular test
// that replays the committed corpus).
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using minfer::gguf::GgufFile;
  auto file = GgufFile::Parse(minfer::MappedFile::FromBytes(
      std::string(reinterpret_cast<const char*>(data), size), "fuzz.gguf"));
  if (!file.ok()) {
    // Errors must always carry a message.
    if (file.status().message().empty()) __builtin_trap();
    return 0;
  }
  const GgufFile& g = **file;
  size_t sink = 0;
  for (const auto& [key, value] : g.metadata()) {
    sink += value.ToString().size();
    (void)g.GetString(key);
    (void)g.GetInt(key);
    (void)g.GetUint(key);
    (void)g.GetFloat(key);
    (void)g.GetBool(key);
    (void)g.GetStringArray(key);
    (void)g.GetIntArray(key);
    (void)g.GetFloatArray(key);
  }
  for (const auto& t : g.tensors()) {
    if (g.FindTensor(t.name) != &t) __builtin_trap();
    // Read the first and last byte of the tensor: ASan flags any range the
    // reader accepted that lies outside the buffer.
    if (t.nbytes > 0) sink += t.data[0] + t.data[t.nbytes - 1];
  }
  return static_cast<int>(sink & 0);
}
