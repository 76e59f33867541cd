// From a minfer.v1.GenerateRequest to a sequence in its model's slot: the
// one place where a generation request is validated, for the gRPC and the
// HTTP front doors alike (the HTTP API translates its JSON into a
// v1::GenerateRequest first). What leaves here is a valid
// runtime::GenerateRequest for the slot's model and context: prompt ids in
// the vocabulary, the prompt shorter than the context, sampling parameters
// in range, max_tokens within the server's limits. The layers below (the
// slot, the batched engine, the completion) state these as preconditions
// and check them only as invariants.
//
// Thread-safe (pure functions over their arguments; SubmitGenerate calls
// the thread-safe SlotManager).
#ifndef MINFER_DAEMON_API_GENERATE_REQUEST_H_
#define MINFER_DAEMON_API_GENERATE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/api/chat_tools.h"
#include "daemon/serving/limits.h"
#include "daemon/serving/sequence.h"
#include "daemon/serving/serving_state.h"
#include "daemon/serving/slot_manager.h"
#include "daemon/serving/tenants.h"
#include "engine/runtime/completion.h"
#include "engine/runtime/model.h"
#include "engine/tokenizer/chat_template.h"
#include "minfer/v1/generation.pb.h"

namespace minfer::daemon {

// The longest cache_salt a request may carry.
inline constexpr size_t kMaxCacheSaltBytes = 256;

// What building a request did besides the request (for metrics).
struct BuildReport {
  // The request has a constraint and it reached the compiler (every other
  // check passed); then `grammar_status` is the compile's and
  // `grammar_seconds` the wall time spent getting the compiled grammar.
  bool compiled_constraint = false;
  absl::Status grammar_status;
  double grammar_seconds = 0;
};

// Validates `request` against the limits and the model and builds the
// engine request (tokenizing text or chat input). INVALID_ARGUMENT names the
// proto field ("sampling.top_p must be in (0, 1] ..."), also as data
// (engine/base/field_error.h: FieldPath "sampling.top_p"; a prompt longer
// than the context has ErrorReason context_length_exceeded). `parsers`:
// the model's reply parsers (the tool-call family a chat's calls are
// parsed and forced in). An unset seed is
// drawn at random. The request's prefix-cache namespace is its cache_salt's
// alone (PrefixCacheNamespace("", cache_salt)); SubmitGenerate adds the
// tenant's. A constraint is compiled last, with the model's grammar
// compiler, once every cheaper check has passed (CompileConstraint: its
// errors are constraint errors naming the proto field); this blocks for
// the compile, so it runs in the request path (the time counts into the
// request's time to first token), never on the slot's worker.
absl::StatusOr<runtime::GenerateRequest> BuildGenerateRequest(const v1::GenerateRequest& request,
                                                              const runtime::Model& model,
                                                              int64_t n_ctx,
                                                              const GenerationLimits& limits,
                                                              BuildReport* report = nullptr,
                                                              const ChatParsers& parsers = {});

// The engine's prefix-cache namespace (runtime::GenerateRequest::cache_ns)
// of a request of a tenant (Tenants::CacheNamespace; "" without tenants)
// with a cache_salt ("" for none): "" when both are empty, so requests
// without either share the cache as they always did; otherwise an encoding
// that keeps the two parts apart (no tenant namespace and salt can spell
// another pair's).
std::string PrefixCacheNamespace(absl::string_view tenant_ns, absl::string_view cache_salt);

// A request's tenant: `tenants` null (none configured) or the index
// Tenants::Identify returned.
struct TenantRef {
  Tenants* tenants = nullptr;
  int index = -1;
};

// Validates, tokenizes and submits `request` to its model's slot: the one
// way a generation enters a slot, for the gRPC and the HTTP API alike.
// Errors: UNAVAILABLE while `state` drains; INVALID_ARGUMENT for a missing
// or malformed model name and as BuildGenerateRequest; the slot manager's
// NOT_FOUND, FAILED_PRECONDITION (not ready) and RESOURCE_EXHAUSTED (queue
// full). `arrival` and `deadline` (Clock::time_point::max() for none) as
// Sequence takes them; `api` ("grpc", "http") labels the request in the
// slot's log. With `model`, also returns the model that serves it (its
// tokenizer renders the response); with `parsers`, the reply parsers it was
// loaded with (ChatOutputOptionsFor reads the reply with them). With a tenant: Tenants::Admit's
// PERMISSION_DENIED and RESOURCE_EXHAUSTED (QuotaExceededError when its
// quota can not hold the request's prompt + max_tokens), the sequence is
// scheduled in the tenant's share group with its weight, and its prefix
// cache is the tenant's (or its cache group's).
absl::StatusOr<std::shared_ptr<Sequence>> SubmitGenerate(
    SlotManager* slots, const ServingState& state, const v1::GenerateRequest& request,
    const GenerationLimits& limits, Clock::time_point arrival, Clock::time_point deadline,
    const char* api, std::shared_ptr<const runtime::Model>* model = nullptr,
    const TenantRef& tenant = {}, ChatParsers* parsers = nullptr);

}  // namespace minfer::daemon

#endif  // MINFER_DAEMON_API_GENERATE_REQUEST_H_
