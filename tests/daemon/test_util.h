// Helpers for the daemon's in-process tests: a loopback daemon, model
// loading, and the reference every streamed output is compared with — the
// same generation run directly on the engine in the test process.
#ifndef MINFER_TESTS_DAEMON_TEST_UTIL_H_
#define MINFER_TESTS_DAEMON_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/minfer_client.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "engine/sampling/finish_reason.h"
#include "grpcpp/grpcpp.h"
#include "minfer/v1/admin.pb.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon::testing {

// Loopback gRPC on a port the OS picks, no metrics exposer; small defaults.
DaemonConfig TestConfig();

// A client of `daemon` (with `token` for admin calls).
std::unique_ptr<client::MinferClient> ClientFor(const Daemon& daemon,
                                                const std::string& token = "");

// LoadModel, waiting for READY.
absl::StatusOr<v1::ModelStatus> Load(client::MinferClient& client, const std::string& name,
                                     const std::string& path, int32_t parallel = 1,
                                     int64_t n_ctx = 512, int32_t queue_size = 4);

// A text prompt; temperature 0 (greedy) unless `seed` is set, then
// temperature 3 with that seed. ignore_eos keeps the length exact.
//
// About the test models: "tiny" (tied embeddings) echoes its last prompt
// token; "tiny-untied" produces varied text. Both are peaked by design, and
// the weight seed does not change their greedy output, so tests that must
// tell two models apart use one of each.
v1::GenerateRequest TextRequest(const std::string& model, const std::string& text,
                                int32_t max_tokens, std::optional<uint64_t> seed = std::nullopt,
                                bool ignore_eos = true);

struct Reference {
  std::vector<int32_t> ids;
  std::string text;
  FinishReason reason = FinishReason::kLength;
};
// Runs `request` (text, chat or token input; temperature, top_k, top_p,
// seed, max_tokens, stop, ignore_eos) on the model at `path` in this
// process, encoding text without control tokens like the daemon does.
// Models are loaded once per path.
absl::StatusOr<Reference> ReferenceGenerate(const std::string& path,
                                            const v1::GenerateRequest& request,
                                            int64_t n_ctx = 512);

// Polls `pred` every millisecond until it holds (true) or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred,
             std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

// Resident set size of this process, in bytes.
uint64_t RssBytes();

// Sends `bytes` as the one request message of `method`
// ("/minfer.v1.GenerationService/Tokenize") over `channel`, with `token`
// as the admin bearer token when set, reads every response, and returns the
// call's status: requests no generated stub would send (garbage, invalid
// UTF-8 in a string field).
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes, const std::string& token = "");

}  // namespace minfer::daemon::testing

#endif  // MINFER_TESTS_DAEMON_TEST_UTIL_H_
