#include "tests/daemon/soak.h"

#include <dirent.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/minfer_client.h"
#include "nlohmann/json.hpp"
#include "tests/daemon/http/raw_client.h"

namespace minfer::soak {
namespace {

using Clock = std::chrono::steady_clock;

// Between an unload's answer and the cycle's memory sample.
constexpr double kSettleSeconds = 0.5;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Sleeps `seconds`, or less if `stop` turns true meanwhile.
void SleepUnless(const std::atomic<bool>& stop, double seconds) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
  while (!stop.load() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::unique_ptr<client::MinferClient> Connect(const SoakOptions& o) {
  client::ClientOptions c;
  c.address = o.address;
  c.token = o.token;
  c.timeout_seconds = 60;  // unary calls; streams have none
  return *client::MinferClient::Create(c);
}

v1::GenerateRequest Greedy(const std::string& model, const std::string& prompt, int tokens) {
  v1::GenerateRequest r;
  r.set_model(model);
  r.set_text(prompt);
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_sampling()->set_seed(0);
  r.mutable_stopping()->set_max_tokens(tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

std::string CodeName(const absl::Status& s) { return absl::StatusCodeToString(s.code()); }

std::string Mib(uint64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); }

// One greedy completion streamed over the OpenAI API. HTTP/1.0, so the
// events come unframed and the connection closes after [DONE].
struct HttpResult {
  std::string error;  // "" when it ran to [DONE]; else "HTTP_<code or why>"
  std::string model;
  std::vector<int32_t> ids;
};

HttpResult HttpStream(const std::string& address, const std::string& model,
                      const std::string& prompt, int tokens) {
  HttpResult r;
  const nlohmann::json body = {{"model", model},       {"prompt", prompt},
                               {"max_tokens", tokens}, {"temperature", 0},
                               {"seed", 0},            {"ignore_eos", true},
                               {"stream", true},       {"return_token_ids", true}};
  const std::string b = body.dump();
  const int fd = minfer::testing::ConnectTo(address);
  if (fd < 0) {
    r.error = "HTTP_connect";
    return r;
  }
  minfer::testing::SendAll(
      fd, absl::StrCat("POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                       "Content-Length: ", b.size(), "\r\n\r\n", b));
  bool closed = false;
  std::string got;
  const auto until = Clock::now() + std::chrono::seconds(300);
  while (!closed && Clock::now() < until) {
    got += minfer::testing::ReadFor(fd, std::chrono::milliseconds(500), &closed);
  }
  close(fd);
  const size_t head_end = got.find("\r\n\r\n");
  if (head_end == std::string::npos || got.rfind("HTTP/1.0 200", 0) != 0) {
    r.error = absl::StrCat("HTTP_", got.substr(9, 3));
    return r;
  }
  bool done = false;
  size_t pos = head_end + 4;
  while (pos < got.size()) {
    size_t end = got.find("\n\n", pos);
    if (end == std::string::npos) end = got.size();
    const std::string ev = got.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;
    if (ev == "data: [DONE]") {
      done = true;
      break;
    }
    const nlohmann::json j = nlohmann::json::parse(ev.substr(6), nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("error")) {
      r.error = absl::StrCat("HTTP_", j["error"].value("code", "error"));
      return r;
    }
    r.model = j.value("model", "");
    if (j.contains("choices") && !j["choices"].empty() && j["choices"][0].contains("token_ids")) {
      for (int32_t id : j["choices"][0]["token_ids"].get<std::vector<int32_t>>()) {
        r.ids.push_back(id);
      }
    }
  }
  if (!done) r.error = "HTTP_no_done";
  return r;
}

}  // namespace

int64_t SoakReport::failed() const {
  int64_t n = 0;
  for (const auto& [code, count] : failed_by_code) n += count;
  return n;
}

double SoakReport::rss_drift_percent() const {
  if (warm.anon_bytes == 0) return 0;
  return 100.0 * (static_cast<double>(end.anon_bytes) - static_cast<double>(warm.anon_bytes)) /
         static_cast<double>(warm.anon_bytes);
}

uint64_t ProcessRss(pid_t pid, const char* field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  const std::string key = absl::StrCat(field, ":");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      std::istringstream fields(line.substr(key.size()));
      uint64_t kb = 0;
      fields >> kb;
      return kb * 1024;
    }
  }
  return 0;
}

int ProcessFds(pid_t pid) {
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/fd").c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

bool IsLoopback(const std::string& address) {
  for (const char* host : {"127.0.0.1:", "localhost:", "[::1]:"}) {
    if (address.rfind(host, 0) == 0 && address.size() > std::string(host).size()) return true;
  }
  return false;
}

absl::StatusOr<SoakReport> RunSoak(const SoakOptions& o) {
  if (!IsLoopback(o.address) || (!o.http_address.empty() && !IsLoopback(o.http_address))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the soak runs on loopback only (127.0.0.1, localhost or [::1]); got '", o.address, "'"));
  }
  if (o.pid <= 0 || ProcessRss(o.pid) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("no process ", o.pid, " to sample"));
  }
  if (o.cycled_path.empty()) return absl::InvalidArgumentError("no file for the cycled model");
  if (o.streams < 1 || o.seconds <= 0) {
    return absl::InvalidArgumentError("streams must be >= 1 and seconds > 0");
  }
  std::unique_ptr<client::MinferClient> admin = Connect(o);
  // The steady model may still be loading (minferd loads in the background).
  const auto ready_by = Clock::now() + std::chrono::seconds(120);
  for (;;) {
    absl::StatusOr<v1::ModelStatus> st = admin->GetModelStatus(o.steady_model);
    if (st.ok() && st->state() == v1::MODEL_STATE_READY) break;
    if (Clock::now() > ready_by || (st.ok() && st->state() == v1::MODEL_STATE_FAILED)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", o.steady_model, "' is not ready: ",
          st.ok() ? v1::ModelState_Name(st->state()) : st.status().ToString()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (absl::StatusOr<v1::SetAliasResponse> a = admin->SetAlias(o.alias, o.steady_model); !a.ok()) {
    return a.status();
  }

  SoakReport report;
  report.streams = o.streams;
  std::mutex mu;  // guards report and `expected`
  // The first output of each (model, prompt): greedy, so every later one
  // must equal it.
  std::map<std::pair<std::string, std::string>, std::vector<int32_t>> expected;
  std::atomic<bool> stop{false}, probing{false};
  const Clock::time_point t0 = Clock::now();
  auto sample = [&] {
    Sample s;
    s.t = Since(t0);
    s.rss_bytes = ProcessRss(o.pid);
    s.anon_bytes = ProcessRss(o.pid, "RssAnon");
    s.fds = ProcessFds(o.pid);
    return s;
  };
  auto record = [&](const Sample& s) {  // requires mu
    report.samples.push_back(s);
    report.max.rss_bytes = std::max(report.max.rss_bytes, s.rss_bytes);
    report.max.anon_bytes = std::max(report.max.anon_bytes, s.anon_bytes);
    report.max.fds = std::max(report.max.fds, s.fds);
  };
  {
    std::lock_guard<std::mutex> lock(mu);
    report.start = sample();
    record(report.start);
  }

  std::vector<std::thread> threads;
  const int http_streams = o.http_address.empty() ? 0 : std::min(o.http_streams, o.streams);
  for (int i = 0; i < http_streams; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; !stop.load(); ++k) {
        const std::string prompt = absl::StrCat("soak stream ", (i + k) % 4);
        const int tokens = (k % 2 == 0) ? o.max_tokens : std::max(2, o.max_tokens / 2);
        HttpResult r = HttpStream(o.http_address, o.alias, prompt, tokens);
        std::lock_guard<std::mutex> lock(mu);
        if (!r.error.empty()) {
          ++report.failed_by_code[r.error];
          if (o.verbose) std::fprintf(stderr, "http stream failed: %s\n", r.error.c_str());
          continue;
        }
        // (Keyed apart from gRPC's: the API's prompt is the same text, but
        // the comparison is within one front door.)
        auto [it, first] = expected.try_emplace(
            {"http:" + r.model, absl::StrCat(prompt, "/", tokens)}, r.ids);
        if (!first && it->second != r.ids) ++report.mismatched;
        ++report.generations_ok;
        ++report.http_ok;
        report.tokens += static_cast<int64_t>(r.ids.size());
      }
    });
  }
  // Idle keep-alive and slow HTTP connections, held open (and reopened
  // when the daemon closes one) for the whole run.
  if (!o.http_address.empty() && o.idle_http + o.slow_http > 0) {
    threads.emplace_back([&] {
      struct Side {
        int fd = -1;
        bool slow = false;
      };
      std::vector<Side> side(o.idle_http + o.slow_http);
      auto open = [&](Side& c) {
        c.fd = minfer::testing::ConnectTo(o.http_address);
        if (c.fd < 0) return;
        if (c.slow) {
          minfer::testing::SendAll(c.fd, "POST /v1/completions HTTP/1.1\r\nX-Slow: ");
        } else {
          minfer::testing::SendAll(c.fd, "GET /health HTTP/1.1\r\n\r\n");
          minfer::testing::ReadUntil(c.fd, "}", std::chrono::seconds(5));
        }
      };
      for (size_t k = 0; k < side.size(); ++k) {
        side[k].slow = static_cast<int>(k) >= o.idle_http;
        open(side[k]);
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        report.side_connections = static_cast<int>(side.size());
      }
      for (int tick = 0; !stop.load(); ++tick) {
        SleepUnless(stop, 1.0);
        for (Side& c : side) {
          bool gone = c.fd < 0;
          if (!gone) {
            pollfd p{c.fd, POLLIN, 0};
            if (poll(&p, 1, 0) > 0) gone = true;  // an answer (408) or the close
          }
          if (!gone && c.slow && tick % 2 == 0) gone = !minfer::testing::SendAll(c.fd, "a");
          if (gone) {
            if (c.fd >= 0) close(c.fd);
            open(c);
            std::lock_guard<std::mutex> lock(mu);
            ++report.side_reopened;
          }
        }
      }
      for (Side& c : side) {
        if (c.fd >= 0) close(c.fd);
      }
    });
  }
  for (int i = http_streams; i < o.streams; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<client::MinferClient> c = Connect(o);  // a connection each
      for (int k = 0; !stop.load(); ++k) {
        const std::string prompt = absl::StrCat("soak stream ", (i + k) % 4);
        const int tokens = (k % 2 == 0) ? o.max_tokens : std::max(2, o.max_tokens / 2);
        absl::StatusOr<client::GenerateResult> r = c->Generate(Greedy(o.alias, prompt, tokens));
        std::lock_guard<std::mutex> lock(mu);
        if (!r.ok()) {
          ++report.failed_by_code[CodeName(r.status())];
          if (o.verbose) std::fprintf(stderr, "stream failed: %s\n", r.status().ToString().c_str());
          continue;
        }
        auto [it, first] = expected.try_emplace({r->model, absl::StrCat(prompt, "/", tokens)},
                                                r->token_ids);
        if (!first && it->second != r->token_ids) ++report.mismatched;
        ++report.generations_ok;
        report.tokens += static_cast<int64_t>(r->token_ids.size());
      }
    });
  }
  // Requests at the cycled model while it loads and unloads, and health
  // checks, as a load balancer or kubelet would send: concurrently, from
  // two clients (gRPC serves health checks on threads it starts and ends as
  // they come, which is what spread freed models over allocator arenas).
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&] {
      std::unique_ptr<client::MinferClient> c = Connect(o);
      while (!stop.load()) {
        if (!probing.load()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          continue;
        }
        absl::StatusOr<client::GenerateResult> r =
            c->Generate(Greedy(o.cycled_model, "probe", 2));
        (void)c->Health(o.cycled_model);
        (void)c->Health("");
        // A breath between probes, so they press on the load without
        // starving the streams of a small machine.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const absl::StatusCode code = r.status().code();
        std::lock_guard<std::mutex> lock(mu);
        ++report.probes_by_code[CodeName(r.status())];
        if (code != absl::StatusCode::kOk && code != absl::StatusCode::kFailedPrecondition &&
            code != absl::StatusCode::kNotFound) {
          ++report.unexpected_probes;
          if (o.verbose) std::fprintf(stderr, "probe: %s\n", r.status().ToString().c_str());
        }
      }
    });
  }
  // Memory and fds, every second.
  threads.emplace_back([&] {
    while (!stop.load()) {
      SleepUnless(stop, 1.0);
      Sample s = sample();
      std::lock_guard<std::mutex> lock(mu);
      record(s);
    }
  });

  auto error = [&](const std::string& what, const absl::Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    report.errors.push_back(absl::StrCat(what, ": ", s.ToString()));
    if (o.verbose) std::fprintf(stderr, "%s: %s\n", what.c_str(), s.ToString().c_str());
  };
  // The cycle: load (probed), alias to it, alias back, unload (probed).
  while (Since(t0) < o.seconds) {
    v1::LoadModelRequest load;
    load.set_name(o.cycled_model);
    load.set_path(o.cycled_path);
    load.set_backend("cpu");
    load.set_n_ctx(o.n_ctx);
    load.set_parallel(o.parallel);
    probing = true;
    absl::StatusOr<v1::ModelStatus> loaded = admin->LoadModel(load);
    probing = false;
    if (!loaded.ok()) {
      error("load", loaded.status());
      SleepUnless(stop, 1.0);
      continue;
    }
    if (auto a = admin->SetAlias(o.alias, o.cycled_model); !a.ok()) error("alias", a.status());
    SleepUnless(stop, std::min(o.alias_seconds, std::max(0.0, o.seconds - Since(t0))));
    if (auto a = admin->SetAlias(o.alias, o.steady_model); !a.ok()) error("alias back", a.status());
    v1::UnloadModelRequest unload;
    unload.set_name(o.cycled_model);
    unload.set_drain_timeout_seconds(30);
    probing = true;
    absl::StatusOr<v1::UnloadModelResponse> unloaded = admin->UnloadModel(unload);
    probing = false;
    if (!unloaded.ok()) {
      error("unload", unloaded.status());
      continue;
    }
    // The daemon hands freed memory back a moment after the unload answers
    // (once the model's last user has let go, heap_trim.h): sample after it.
    SleepUnless(stop, kSettleSeconds);
    const Sample s = sample();
    std::lock_guard<std::mutex> lock(mu);
    report.drain_cancelled += unloaded->cancelled_sequences();
    ++report.cycles;
    record(s);
    report.cycle_ends.push_back(s);
    if (o.verbose) {
      std::fprintf(stderr, "cycle %d at %.1f s: RSS %s (anonymous %s), %d fds\n", report.cycles,
                   s.t, Mib(s.rss_bytes).c_str(), Mib(s.anon_bytes).c_str(), s.fds);
    }
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  report.seconds = Since(t0);
  std::lock_guard<std::mutex> lock(mu);
  const std::vector<Sample>& ends = report.cycle_ends;
  if (!ends.empty()) {
    // Three cycle ends at the warm-up, the greatest, against the least of
    // the last three: a creep shows in every one of them, a moment's spike
    // (a free that came late) in one. A cycle end lands before or after the
    // heap trim that follows an unload (heap_trim.h), a sawtooth of about
    // 15 MiB (11 27 12 31 27 ...); the least at the warm-up caught a trough
    // and failed a flat run whose last three ends were peaks. A run shorter
    // than the warm-up compares its first cycles.
    auto by_anon = [](const Sample& a, const Sample& b) { return a.anon_bytes < b.anon_bytes; };
    auto least = [&](std::vector<Sample>::const_iterator begin,
                     std::vector<Sample>::const_iterator end) {
      return *std::min_element(begin, end, by_anon);
    };
    auto warm = std::find_if(ends.begin(), ends.end(),
                             [&](const Sample& s) { return s.t >= o.warmup_seconds; });
    if (warm == ends.end()) warm = ends.begin();
    report.warm = *std::max_element(warm, warm + std::min<ptrdiff_t>(3, ends.end() - warm), by_anon);
    report.end = least(ends.end() - std::min<ptrdiff_t>(3, ends.end() - warm), ends.end());
  } else {
    report.warm = report.start;
    report.end = sample();
  }
  return report;
}

std::vector<std::string> Violations(const SoakReport& r, const SoakLimits& limits) {
  std::vector<std::string> v;
  if (r.generations_ok == 0) v.push_back("no stream completed");
  if (r.failed() > 0) v.push_back(absl::StrCat(r.failed(), " streams failed"));
  if (r.mismatched > 0) v.push_back(absl::StrCat(r.mismatched, " streams gave another output"));
  if (r.unexpected_probes > 0) {
    v.push_back(absl::StrCat(r.unexpected_probes, " probes were refused unexpectedly"));
  }
  if (r.drain_cancelled > 0) {
    v.push_back(absl::StrCat(r.drain_cancelled, " sequences were cancelled by a drain"));
  }
  if (!r.errors.empty()) v.push_back(absl::StrCat(r.errors.size(), " admin calls failed"));
  if (r.cycles == 0) v.push_back("no load/unload cycle completed");
  if (r.rss_drift_percent() > limits.max_rss_drift_percent) {
    v.push_back(absl::StrFormat("anonymous RSS drifted %+.2f %% after the warm-up (limit %.2f %%)",
                                r.rss_drift_percent(), limits.max_rss_drift_percent));
  }
  if (r.end.anon_bytes > r.warm.anon_bytes &&
      r.end.anon_bytes - r.warm.anon_bytes > limits.max_rss_growth_bytes) {
    v.push_back(absl::StrFormat("anonymous RSS grew by %s after the warm-up (limit %s)",
                                Mib(r.end.anon_bytes - r.warm.anon_bytes),
                                Mib(limits.max_rss_growth_bytes)));
  }
  if (r.end.fds > r.warm.fds + limits.max_fd_growth) {
    v.push_back(absl::StrFormat("fds grew from %d to %d after the warm-up", r.warm.fds, r.end.fds));
  }
  return v;
}

std::string FormatReport(const SoakReport& r) {
  std::vector<std::string> failed, probes;
  for (const auto& [code, n] : r.failed_by_code) failed.push_back(absl::StrCat(code, " ", n));
  for (const auto& [code, n] : r.probes_by_code) probes.push_back(absl::StrCat(code, " ", n));
  std::string out = absl::StrFormat(
      "soak: %.1f s, %d concurrent streams, %d cycles (load, alias to it and back, drained "
      "unload)\n",
      r.seconds, r.streams, r.cycles);
  absl::StrAppendFormat(&out,
                        "streams: %d ok, %d failed%s, %d mismatched; %d tokens (%.0f tok/s)\n",
                        r.generations_ok, r.failed(),
                        failed.empty() ? "" : absl::StrCat(" (", absl::StrJoin(failed, ", "), ")"),
                        r.mismatched, r.tokens, r.seconds > 0 ? r.tokens / r.seconds : 0.0);
  if (r.side_connections > 0 || r.http_ok > 0) {
    absl::StrAppendFormat(&out,
                          "http: %d streams ok; %d idle/slow connections held open, %d reopened\n",
                          r.http_ok, r.side_connections, r.side_reopened);
  }
  absl::StrAppendFormat(&out,
                        "requests at the cycled model while loading/unloading: %s "
                        "(%d unexpected)\n",
                        probes.empty() ? "none" : absl::StrJoin(probes, ", "), r.unexpected_probes);
  absl::StrAppendFormat(&out, "drains: %d sequences cancelled; admin errors: %d%s\n",
                        r.drain_cancelled, r.errors.size(),
                        r.errors.empty() ? "" : absl::StrCat(" (first: ", r.errors.front(), ")"));
  absl::StrAppendFormat(&out, "RSS: start %s, after warm-up (%.0f s) %s, end %s, max %s\n",
                        Mib(r.start.rss_bytes), r.warm.t, Mib(r.warm.rss_bytes),
                        Mib(r.end.rss_bytes), Mib(r.max.rss_bytes));
  absl::StrAppendFormat(
      &out,
      "anonymous RSS: start %s, after warm-up %s, end %s, max %s; drift after warm-up %+.2f %%\n",
      Mib(r.start.anon_bytes), Mib(r.warm.anon_bytes), Mib(r.end.anon_bytes),
      Mib(r.max.anon_bytes), r.rss_drift_percent());
  absl::StrAppendFormat(&out, "fds: start %d, after warm-up %d, end %d, max %d\n", r.start.fds,
                        r.warm.fds, r.end.fds, r.max.fds);
  return out;
}

std::string ReportJson(const SoakReport& r) {
  nlohmann::json j;
  j["seconds"] = r.seconds;
  j["streams"] = r.streams;
  j["cycles"] = r.cycles;
  j["generations_ok"] = r.generations_ok;
  j["tokens"] = r.tokens;
  j["failed"] = r.failed();
  j["failed_by_code"] = r.failed_by_code;
  j["mismatched"] = r.mismatched;
  j["probes_by_code"] = r.probes_by_code;
  j["unexpected_probes"] = r.unexpected_probes;
  j["drain_cancelled"] = r.drain_cancelled;
  j["http_ok"] = r.http_ok;
  j["side_connections"] = r.side_connections;
  j["side_reopened"] = r.side_reopened;
  j["errors"] = r.errors;
  auto sample = [](const Sample& s) {
    return nlohmann::json{
        {"t", s.t}, {"rss_bytes", s.rss_bytes}, {"anon_bytes", s.anon_bytes}, {"fds", s.fds}};
  };
  j["rss_bytes"] = {{"start", r.start.rss_bytes},
                    {"warm", r.warm.rss_bytes},
                    {"end", r.end.rss_bytes},
                    {"max", r.max.rss_bytes}};
  j["anon_bytes"] = {{"start", r.start.anon_bytes},
                     {"warm", r.warm.anon_bytes},
                     {"end", r.end.anon_bytes},
                     {"max", r.max.anon_bytes}};
  j["fds"] = {{"start", r.start.fds}, {"warm", r.warm.fds}, {"end", r.end.fds}, {"max", r.max.fds}};
  j["rss_drift_percent"] = r.rss_drift_percent();
  j["warm_t"] = r.warm.t;
  nlohmann::json ends = nlohmann::json::array();
  for (const Sample& s : r.cycle_ends) ends.push_back(sample(s));
  j["cycle_ends"] = ends;
  return j.dump();
}

}  // namespace minfer::soak
