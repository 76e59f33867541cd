#!/usr/bin/env bash
# The README's first command: installs what is missing, builds minfer, writes
# the embedded default model (a small synthetic Qwen2 with the real Qwen2.5
# tokenizer) and runs the main job on it: a streamed generation through the
# `minfer` CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel build //engine/tools:minfer
minfer=bazel-bin/engine/tools/minfer
mkdir -p models
if [[ ! -f models/default.gguf ]]; then
  "$minfer" mkmodel --shape small --type q8_0 --seed 1 -o models/default.gguf
fi
echo "--- minfer run -m models/default.gguf (synthetic weights: the text is gibberish by design)"
"$minfer" run -m models/default.gguf --chat -p "Write a haiku about inference servers." -n 48
