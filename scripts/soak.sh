#!/usr/bin/env bash
# The minferd soak, on loopback and bounded in time:
#
#   scripts/soak.sh [SECONDS [STREAMS]]        # default: 600 s, 8 streams
#
# Starts a minferd of its own (127.0.0.1, a port the OS picks) serving a
# steady model "a", then runs minferd_soak (tests/daemon/soak.h) for SECONDS:
# STREAMS concurrent greedy streams through the alias "prod", while another
# loop loads a second model "b" (requests are sent at it while it loads),
# points "prod" at it and back, and unloads it (drained; requests again while
# it unloads), over and over. Half the streams go through the OpenAI HTTP
# API, and 200 idle keep-alive plus 50 slowly dripping HTTP connections are
# held open throughout (MINFER_SOAK_IDLE_HTTP, MINFER_SOAK_SLOW_HTTP). It reports the streams, failures by code, the
# daemon's RSS (start, after the warm-up, end, max; all of it and its
# anonymous part) and its open fds, then stops minferd with SIGTERM. Exit
# status 0 when the run passed: no failed stream, anonymous RSS (the heap;
# the rest is mostly mapped weights, page cache) drifting less than
# MINFER_SOAK_MAX_DRIFT percent (default 1) after the warm-up, fds flat, and
# minferd exiting 0.
#
# Both models are synthetic Qwen2 "small" files (256 wide, the real Qwen2.5
# tokenizer) written with `minfer mkmodel` into a temporary directory.
# Environment: MINFER_SOAK_WARMUP (seconds, default 60), MINFER_SOAK_TOKENS
# (per stream, default 48), MINFER_SOAK_JSON (also write the report there),
# MINFER_SOAK_MAX_DRIFT. CI runs a one-minute version:
# bazel test //tests/daemon:soak_process_test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
streams=${2:-8}
warmup=${MINFER_SOAK_WARMUP:-60}
tokens=${MINFER_SOAK_TOKENS:-48}
max_drift=${MINFER_SOAK_MAX_DRIFT:-1}
idle_http=${MINFER_SOAK_IDLE_HTTP:-200}
slow_http=${MINFER_SOAK_SLOW_HTTP:-50}

bazel build //engine/tools:minfer //daemon:minferd //tests/daemon:minferd_soak
minfer=bazel-bin/engine/tools/minfer
minferd=bazel-bin/daemon/minferd
soak=bazel-bin/tests/daemon/minferd_soak

run=$(mktemp -d)
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT

"$minfer" mkmodel --shape small --type q8_0 --seed 1 -o "$run/a.gguf" >/dev/null
"$minfer" mkmodel --shape small --type q8_0 --seed 2 -o "$run/b.gguf" >/dev/null

echo "--- minferd --model a=a.gguf (loopback), soak for ${seconds} s with ${streams} streams"
"$minferd" --listen 127.0.0.1:0 --metrics-listen "" --model a="$run/a.gguf" --ctx 1024 \
  --parallel "$streams" --ready-file "$run/ready.json" --log-level warn \
  --http-listen 127.0.0.1:0 --http-header-timeout $((seconds + 600)) \
  --http-idle-timeout $((seconds + 600)) 2>"$run/minferd.log" &
pid=$!
for _ in $(seq 1 200); do
  [[ -s "$run/ready.json" ]] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    cat "$run/minferd.log" >&2
    exit 1
  fi
  sleep 0.05
done
addr=$(sed -n 's/.*"address":"\([^"]*\)".*/\1/p' "$run/ready.json")
http_addr=$(sed -n 's/.*"http_address":"\([^"]*\)".*/\1/p' "$run/ready.json")

status=0
json_args=()
[[ -n "${MINFER_SOAK_JSON:-}" ]] && json_args=(--json "$MINFER_SOAK_JSON")
# The soak ends by itself after $seconds (plus the last cycle); the timeout
# only guards against a daemon that stops answering.
timeout $((seconds + 300)) "$soak" --addr "$addr" --pid "$pid" --cycled-path "$run/b.gguf" \
  --streams "$streams" --seconds "$seconds" --warmup "$warmup" --max-tokens "$tokens" \
  --ctx 1024 --parallel 4 --max-rss-drift "$max_drift" --http-addr "$http_addr" \
  --http-streams $((streams / 2)) --idle-http "$idle_http" --slow-http "$slow_http" \
  "${json_args[@]}" || status=$?

kill -TERM "$pid"
code=0
wait "$pid" || code=$?
pid=""
echo "minferd exited with status $code"
if [[ "$code" -ne 0 ]]; then
  tail -n 20 "$run/minferd.log" >&2
  status=1
fi
exit "$status"
