#!/usr/bin/env bash
# Fuzzes the HTTP front door's input side — the request parser and the
# OpenAI request decoders (tests/daemon/http/fuzz/http_fuzz_target.cc) —
# with libFuzzer + ASan + UBSan (clang).
#
#   scripts/fuzz_http.sh [SECONDS]      (default 600)
#
# Builds with Bazel and clang in an output base of its own
# (/tmp/minfer-fuzz-http/bazel), so the regular build's cache is untouched.
# Works on a copy of the committed corpus (tests/daemon/http/fuzz/corpus) in
# /tmp/minfer-fuzz-http; crash reproducers land in its artifacts/. Add a
# fixed reproducer to the committed corpus so http_corpus_test replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
work=/tmp/minfer-fuzz-http
mkdir -p "$work/corpus" "$work/artifacts"
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  sudo=""; [[ "$(id -u)" -ne 0 ]] && sudo=sudo
  $sudo apt-get install -y -q clang libclang-rt-14-dev
fi
scripts/install_deps.sh >/dev/null
cp -n tests/daemon/http/fuzz/corpus/* "$work/corpus/" 2>/dev/null || true

san=(--copt=-fsanitize=fuzzer-no-link,address,undefined --copt=-fno-sanitize-recover=undefined
  --copt=-O1 --copt=-g --linkopt=-fsanitize=fuzzer,address,undefined
  # Bazel links with the C driver: ask for the C++ parts of UBSan.
  --linkopt=-fsanitize-link-c++-runtime
  # The engine's SIMD files rely on gcc's per-function targets; the fuzzer runs
  # where it is built.
  --copt=-march=native)
# (No convenience symlinks: bazel-bin keeps pointing at the regular build.)
export CC=clang CXX=clang++
bazel --output_base="$work/bazel" build --symlink_prefix=/ "${san[@]}" \
  //tests/daemon/http/fuzz:http_fuzzer
bin=$(bazel --output_base="$work/bazel" info --symlink_prefix=/ "${san[@]}" bazel-bin)
cp -f "$bin/tests/daemon/http/fuzz/http_fuzzer" "$work/http_fuzzer"

cat > "$work/http.dict" <<'DICT'
"POST "
"GET "
" HTTP/1.1\x0d\x0a"
" HTTP/1.0\x0d\x0a"
"\x0d\x0a\x0d\x0a"
"Content-Length: "
"Transfer-Encoding: chunked\x0d\x0a"
"Connection: keep-alive\x0d\x0a"
"Expect: 100-continue\x0d\x0a"
"Authorization: Bearer "
"/v1/chat/completions"
"/v1/completions"
"\"messages\""
"\"prompt\""
"\"model\""
"\"stream\":true"
"\"max_tokens\""
"\"stop\""
"\"tools\""
"\"response_format\""
"\"chat_template_kwargs\""
"\"cache_salt\""
"\"logprobs\""
"\"top_logprobs\""
"\"role\":\"user\""
"\"content\""
DICT

"$work/http_fuzzer" "$work/corpus" -dict="$work/http.dict" -max_len=8192 \
  -max_total_time="$secs" -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 |
  tee "$work/fuzz.log" | grep -E '^#[0-9]+ +(pulse|DONE)|ERROR|SUMMARY|stat::' || true
echo "fuzz_http: log $work/fuzz.log; artifacts in $work/artifacts:"
ls -la "$work/artifacts"
