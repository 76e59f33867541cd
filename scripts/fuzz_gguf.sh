#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer + ASan + UBSan (clang).
#
#   scripts/fuzz_gguf.sh [SECONDS]      (default 600)
#
# Works on a copy of the committed corpus (tests/engine/gguf/fuzz/corpus) in
# /tmp/minfer-fuzz; crash reproducers land in /tmp/minfer-fuzz/artifacts. Add
# a fixed reproducer to the committed corpus so gguf_corpus_test replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
work=/tmp/minfer-fuzz
mkdir -p "$work/corpus" "$work/artifacts"
if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  sudo=""; [[ "$(id -u)" -ne 0 ]] && sudo=sudo
  $sudo apt-get install -y -q clang libclang-rt-14-dev
fi
scripts/install_deps.sh >/dev/null
cp -n tests/engine/gguf/fuzz/corpus/* "$work/corpus/" 2>/dev/null || true

absl_libs=(-labsl_status -labsl_statusor -labsl_cord -labsl_cordz_info -labsl_cord_internal
  -labsl_cordz_functions -labsl_cordz_handle -labsl_str_format_internal -labsl_strings
  -labsl_strings_internal -labsl_int128 -labsl_throw_delegate -labsl_raw_logging_internal
  -labsl_base -labsl_spinlock_wait -labsl_synchronization -labsl_time -labsl_time_zone
  -labsl_stacktrace -labsl_symbolize -labsl_debugging_internal -labsl_demangle_internal
  -labsl_malloc_internal -labsl_graphcycles_internal -labsl_exponential_biased
  -labsl_bad_optional_access -labsl_strerror)

clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I. engine/gguf/gguf.cc engine/base/mapped_file.cc engine/quant/ggml_types.cc \
  tests/engine/gguf/fuzz/gguf_fuzz_target.cc "${absl_libs[@]}" -o "$work/gguf_fuzzer"

cat > "$work/gguf.dict" <<'DICT'
"GGUF"
"\x03\x00\x00\x00"
"\x02\x00\x00\x00"
"\x09\x00\x00\x00"
"\x08\x00\x00\x00"
"general.alignment"
"general.architecture"
"tokenizer.ggml.tokens"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x00\x00\x00\x00\x00\x00\x00\x10"
DICT

"$work/gguf_fuzzer" "$work/corpus" -dict="$work/gguf.dict" -max_len=4096 \
  -max_total_time="$secs" -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>&1 |
  tee "$work/fuzz.log" | grep -E '^#[0-9]+ +(pulse|DONE)|ERROR|SUMMARY|stat::' || true
echo "fuzz_gguf: log $work/fuzz.log; artifacts in $work/artifacts:"
ls -la "$work/artifacts"
