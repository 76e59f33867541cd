// Test support for structured outputs: the CI schema set
// (tests/data/grammar/schemas.jsonl) and ajv, the JSON Schema validator
// from npm, as the independent judge of what is valid.
//
// The schema set is in MaskBench's shape, one schema per line, with keys
// the bench ignores and the tests read:
//   "name"      the schema's name;
//   "expect"    "compile" (absent: the default), "refuse" (a keyword the
//               front end documents as unenforceable) or "either" (an edge
//               the front end may or may not support yet);
//   tests[i].restricted   on a valid instance the front end rejects by a
//               documented restriction (property order, additionalProperties
//               absent): why.
#ifndef MINFER_TESTS_SUPPORT_STRUCTURED_H_
#define MINFER_TESTS_SUPPORT_STRUCTURED_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace minfer::testing {

// The schema set's path in the test's runfiles.
inline constexpr char kSchemaSetPath[] = "tests/data/grammar/schemas.jsonl";

struct SchemaCase {
  std::string name;
  std::string schema;  // compact JSON, in the file's member order
  std::string expect;  // "compile", "refuse" or "either"
  struct Test {
    std::string data;  // compact JSON, in the file's member order
    bool valid = false;
    std::string restricted;
  };
  std::vector<Test> tests;
};

// Reads a schema set (INVALID_ARGUMENT naming the line for a bad one).
absl::StatusOr<std::vector<SchemaCase>> LoadSchemaSet(const std::string& path);

// ajv's view of a schema set's labels: every instance whose "valid"
// disagrees with ajv, and every schema ajv cannot compile, one line each.
struct AjvLabels {
  int schemas = 0;
  int checked = 0;
  std::vector<std::string> mislabeled;
  std::vector<std::string> uncompilable;
};
absl::StatusOr<AjvLabels> AjvCheckLabels(const std::string& jsonl_path);

// ajv's verdict on output texts: `outputs` pairs an index into `schemas`
// (JSON texts) with a text to judge. One node process for all of them.
struct AjvVerdict {
  bool json = false;   // the text parses as JSON
  bool valid = false;  // and validates against its schema
  std::string error;
};
absl::StatusOr<std::vector<AjvVerdict>> AjvValidate(
    const std::vector<std::string>& schemas, const std::vector<std::pair<int, std::string>>& outputs);

}  // namespace minfer::testing

#endif  // MINFER_TESTS_SUPPORT_STRUCTURED_H_
