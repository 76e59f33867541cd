#!/usr/bin/env bash
# Runs on the GPU machine from the bundle made by scripts/gpu_bundle.sh:
#   bash .gpu/gpu_run.sh tests           every GPU test binary
#   bash .gpu/gpu_run.sh kbench [ARGS]   kernel micro-benchmarks
#   bash .gpu/gpu_run.sh models          write the synthetic benchmark models to /tmp/minfer-models
#   bash .gpu/gpu_run.sh bench [SPEC..]  minfer bench per SPEC "shape:type[:minfer bench flags]"
#   bash .gpu/gpu_run.sh cmd CMD...      run CMD with the bundle's environment
# Logs go to $OUT (when set) so they come back with the device tool.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp/minfer-out}"
mkdir -p "$out" /tmp/minfer-lib /tmp/minfer-models
[[ -f /tmp/minfer-lib/.ok ]] || { xz -dc "$here/lib.tar.xz" | tar -C /tmp/minfer-lib -xf - && touch /tmp/minfer-lib/.ok; }
[[ -f /tmp/tokenizer.json ]] || xz -dc "$here/tokenizer.json.xz" > /tmp/tokenizer.json
# Binaries: unpacked fresh each time (the bundle may have been rebuilt).
rm -rf /tmp/minfer-bin && mkdir -p /tmp/minfer-bin && xz -dc "$here/bin.tar.xz" | tar -C /tmp/minfer-bin -xf -
export LD_LIBRARY_PATH=/tmp/minfer-lib
export MINFER_TOKENIZER_JSON=/tmp/tokenizer.json
export PATH="/tmp/minfer-bin:$PATH"
bin=/tmp/minfer-bin
mode="${1:-tests}"; shift || true

run_tests() {
  local pass=0 fail=0 summary=""
  for t in "$bin"/*_test; do
    local name; name="$(basename "$t")"
    if TEST_TMPDIR=/tmp/minfer-models "$t" "$@" > "$out/$name.log" 2>&1; then
      pass=$((pass + 1)); summary+="PASS $name\n"
    else
      fail=$((fail + 1)); summary+="FAIL $name\n"
      tail -n 40 "$out/$name.log"
    fi
  done
  printf "%b" "$summary"
  echo "gpu tests: $pass passed, $fail failed"
}

case "$mode" in
  tests) run_tests "$@" ;;
  kbench)
    for b in matmul_bench attention_bench; do
      [[ -x "$bin/$b" ]] && "$bin/$b" "$@" 2>&1 | tee "$out/$b.log"
    done ;;
  models)
    # The benchmark models of the issues (made here: never sent), with the
    # time each took (mkmodel is multi-threaded: 16 cores on this machine).
    for spec in "${@:-7b:q4_k_m 7b:q4_0 7b:q8_0 0.5b:q4_k_m}"; do
      for s in $spec; do
        shape="${s%%:*}"; type="${s#*:}"
        f="/tmp/minfer-models/$shape-$type.gguf"
        [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
      done
    done ;;
  bench)
    for spec in "$@"; do
      IFS=: read -r shape type flags <<< "$spec"
      f="/tmp/minfer-models/$shape-$type.gguf"
      [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
      # Peak device memory of the run, sampled independently of minfer.
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > /tmp/smi.log 2>/dev/null &
      smi=$!
      # shellcheck disable=SC2086
      minfer bench -m "$f" ${flags:--p 512 -n 128 -r 3} 2>&1 | tee -a "$out/bench.log"
      kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
      echo "peak VRAM during $shape $type ${flags:-}: $(sort -n /tmp/smi.log | tail -1) MiB (nvidia-smi)" | tee -a "$out/bench.log"
    done ;;
  cmd) "$@" ;;
  *) echo "usage: gpu_run.sh tests|bench|cmd ..." >&2; exit 2 ;;
esac
