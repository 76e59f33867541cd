#!/usr/bin/env bash
# Runs on the GPU machine from the bundle made by scripts/gpu_bundle.sh:
#   bash .gpu/gpu_run.sh tests           every GPU test binary
#   bash .gpu/gpu_run.sh bench [ARGS]    kernel micro-benchmarks + minfer bench on synthetic models
#   bash .gpu/gpu_run.sh cmd CMD...      run CMD with the bundle's environment
# Logs go to $OUT (when set) so they come back with the device tool.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp/minfer-out}"
mkdir -p "$out" /tmp/minfer-lib /tmp/minfer-models
[[ -f /tmp/minfer-lib/.ok ]] || { xz -dc "$here/lib.tar.xz" | tar -C /tmp/minfer-lib -xf - && touch /tmp/minfer-lib/.ok; }
[[ -f /tmp/tokenizer.json ]] || xz -dc "$here/tokenizer.json.xz" > /tmp/tokenizer.json
export LD_LIBRARY_PATH=/tmp/minfer-lib
export MINFER_TOKENIZER_JSON=/tmp/tokenizer.json
export PATH="$here/bin:$PATH"
mode="${1:-tests}"; shift || true

run_tests() {
  local pass=0 fail=0 summary=""
  for t in "$here"/bin/*_test; do
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
  bench)
    for b in matmul_bench attention_bench; do
      [[ -x "$here/bin/$b" ]] && "$here/bin/$b" "$@" 2>&1 | tee "$out/$b.log"
    done ;;
  cmd) "$@" ;;
  *) echo "usage: gpu_run.sh tests|bench|cmd ..." >&2; exit 2 ;;
esac
