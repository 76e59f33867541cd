#!/usr/bin/env bash
# The README's first command: installs what is missing, builds minferd,
# minferctl and minfer, writes the embedded default model (a small synthetic
# Qwen2 with the real Qwen2.5 tokenizer) and runs the main job on it:
# minferd serving the model, one chat completion streamed through
# `minferctl generate`, the model's status, then a clean stop (SIGTERM ->
# drain -> exit 0).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel build //engine/tools:minfer //daemon:minferd //client:minferctl
minfer=bazel-bin/engine/tools/minfer
minferd=bazel-bin/daemon/minferd
minferctl=bazel-bin/client/minferctl
mkdir -p models
if [[ ! -f models/default.gguf ]]; then
  "$minfer" mkmodel --shape small --type q8_0 --seed 1 -o models/default.gguf
fi

run=$(mktemp -d)
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT

# Port 0: the OS picks a free port; minferd writes the address it bound to
# the ready file once it serves.
echo "--- minferd --model default=models/default.gguf"
"$minferd" --listen 127.0.0.1:0 --metrics-listen "" --model default=models/default.gguf \
  --ready-file "$run/ready.json" 2>"$run/minferd.log" &
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
ctl() { "$minferctl" --addr "$addr" "$@"; }
# The model loads in the background; its health turns SERVING when ready.
for _ in $(seq 1 600); do
  ctl health default >/dev/null 2>&1 && break
  sleep 0.1
done
cat "$run/minferd.log"

echo "--- minferctl generate default (synthetic weights: the text is gibberish by design)"
ctl generate default "Write a haiku about inference servers." --chat -n 48 --temp 0
echo "--- minferctl status default"
ctl status default

echo "--- stopping minferd (SIGTERM: drain, then exit)"
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
pid=""
tail -n 6 "$run/minferd.log"
echo "minferd exited with status $code"
exit "$code"
