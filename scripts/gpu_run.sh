#!/usr/bin/env bash
# Runs on the GPU machine from the bundle made by scripts/gpu_bundle.sh:
#   bash .gpu/gpu_run.sh tests           every GPU test binary
#   bash .gpu/gpu_run.sh kbench [ARGS]   kernel micro-benchmarks
#   bash .gpu/gpu_run.sh models          write the synthetic benchmark models to /tmp/minfer-models
#   bash .gpu/gpu_run.sh bench [SPEC..]  minfer bench per SPEC "shape:type[:minfer bench flags]"
#   bash .gpu/gpu_run.sh daemon [SPEC..] minferd with several models on the GPU: greedy
#                                        references from `minfer run`, single-stream
#                                        `minfer bench`, then `minferctl bench` alone
#                                        and concurrently (SPEC "name:shape:type")
#   bash .gpu/gpu_run.sh serve [SPEC [PARALLEL [CTX [STREAMS..]]]]
#                                        minferd serving one model (SPEC "name:shape:type",
#                                        default m7:7b:q4_k_m) to 1, 4, 16 and 64 concurrent
#                                        greedy streams (minferctl bench): aggregate and
#                                        per-stream tok/s, TTFT percentiles, failures, and
#                                        every stream's ids against `minfer run`
#   bash .gpu/gpu_run.sh ab KNOB SPEC..  minfer bench per SPEC with KNOB=0 then KNOB=1 (A/B)
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

run_bench() {
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
  done
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
  bench) run_bench "$@" ;;
  daemon)
    specs=("${@:-m05:0.5b:q4_k_m m15:1.5b:q8_0 m7:7b:q4_k_m}")
    read -r -a specs <<< "${specs[*]}"
    prompt="The quick brown fox jumps over the lazy dog. Once upon a time"
    names=()
    for spec in "${specs[@]}"; do
      IFS=: read -r name shape type <<< "$spec"
      f="/tmp/minfer-models/$shape-$type.gguf"
      [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
      # The single-model references: greedy ids, and decode speed alone.
      minfer run -m "$f" --backend cuda -p "$prompt" -n 128 --temp 0 --ignore-eos --json \
        > "$out/run-$name.json" 2> "$out/run-$name.err" || tail -5 "$out/run-$name.err"
      minfer bench -m "$f" -p 16 -n 128 -r 3 2>&1 | tail -1 | tee -a "$out/daemon-bench.log"
      names+=("$name")
    done
    minferd --listen 127.0.0.1:50051 --metrics-listen 127.0.0.1:9464 --ready-file /tmp/ready.json \
      > "$out/minferd.log" 2>&1 &
    d=$!
    for _ in $(seq 100); do [[ -f /tmp/ready.json ]] && break; sleep 0.1; done
    for spec in "${specs[@]}"; do
      IFS=: read -r name shape type <<< "$spec"
      minferctl load "$name" "/tmp/minfer-models/$shape-$type.gguf" --backend cuda --ctx 4096 \
        --parallel 4 -q | tee -a "$out/daemon-bench.log"
    done
    minferctl status | tee -a "$out/daemon-bench.log"
    minferctl list | tee -a "$out/daemon-bench.log"
    for n in "${names[@]}"; do
      minferctl bench "$n" -n 128 -p "$prompt" | tail -1 | sed "s/^/alone $n: /" | tee -a "$out/daemon-bench.log"
      minferctl --json bench "$n" -n 128 -p "$prompt" > "$out/alone-$n.json"
    done
    minferctl --json bench "${names[@]}" -c 1 -n 128 -p "$prompt" > "$out/concurrent-1.json"
    minferctl bench "${names[@]}" -c 1 -n 128 -p "$prompt" | tee -a "$out/daemon-bench.log"
    minferctl bench "${names[@]}" -c 4 -n 128 -p "$prompt" | tee -a "$out/daemon-bench.log"
    curl -s 127.0.0.1:9464/metrics > "$out/metrics.txt" 2>/dev/null || true
    kill -TERM "$d"; wait "$d"; echo "minferd exit: $?" | tee -a "$out/daemon-bench.log"
    # Greedy ids through gRPC (alone and concurrent) against `minfer run`.
    if command -v python3 > /dev/null; then
      python3 - "$out" "${names[@]}" <<'PY' | tee -a "$out/daemon-bench.log"
import json, sys
out, names = sys.argv[1], sys.argv[2:]
conc = json.load(open(f"{out}/concurrent-1.json"))["streams"]
for n in names:
    ref = json.load(open(f"{out}/run-{n}.json"))["generated_ids"]
    alone = json.load(open(f"{out}/alone-{n}.json"))["streams"][0]["ids"]
    both = [s["ids"] for s in conc if s["model"] == n]
    ok = alone == ref and all(ids == ref for ids in both)
    print(f"greedy {n}: minfer run {len(ref)} ids; gRPC alone {'equal' if alone == ref else 'DIFFERENT'}; "
          f"gRPC concurrent {'equal' if both and all(i == ref for i in both) else 'DIFFERENT'}")
PY
    fi
    # One file for the JSON (the device tool brings back a limited number).
    (cd "$out" && tar -cf daemon-json.tar run-*.json run-*.err alone-*.json concurrent-1.json &&
      rm -f run-*.json run-*.err alone-*.json concurrent-1.json)
    ;;
  serve)
    spec="${1:-m7:7b:q4_k_m}"; par="${2:-64}"; ctx="${3:-2048}"
    shift 3 2>/dev/null || shift $#
    streams=("${@:-1 4 16 64}")
    read -r -a streams <<< "${streams[*]}"
    IFS=: read -r name shape type <<< "$spec"
    prompt="The quick brown fox jumps over the lazy dog. Once upon a time"
    f="/tmp/minfer-models/$shape-$type.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
    minfer run -m "$f" --backend cuda -p "$prompt" -n 128 --temp 0 --ignore-eos --json \
      > "$out/serve-run.json" 2> "$out/serve-run.err" || tail -5 "$out/serve-run.err"
    rm -f /tmp/ready.json
    minferd --listen 127.0.0.1:50051 --metrics-listen 127.0.0.1:9464 --ready-file /tmp/ready.json \
      > "$out/serve-minferd.log" 2>&1 &
    d=$!
    for _ in $(seq 100); do [[ -f /tmp/ready.json ]] && break; sleep 0.1; done
    minferctl load "$name" "$f" --backend cuda --ctx "$ctx" --parallel "$par" --queue-size 256 -q \
      | tee -a "$out/serve.log"
    minferctl status "$name" | tee -a "$out/serve.log"
    for c in "${streams[@]}"; do
      minferctl --json bench "$name" -c "$c" -n 128 -p "$prompt" > "$out/serve-$c.json"
    done
    minferctl status "$name" | tee -a "$out/serve.log"
    curl -s 127.0.0.1:9464/metrics > "$out/serve-metrics.txt" 2>/dev/null || true
    kill -TERM "$d"; wait "$d"; echo "minferd exit: $?" | tee -a "$out/serve.log"
    python3 - "$out" "${streams[@]}" <<'PY' | tee -a "$out/serve.log"
import json, sys
out, counts = sys.argv[1], sys.argv[2:]
ref = json.load(open(f"{out}/serve-run.json"))["generated_ids"]
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else 0
print("| streams | aggregate tok/s | per-stream tok/s (median / min) | TTFT p50 / p90 / p99 (s) | failed | greedy ids = minfer run |")
print("| ---: | ---: | ---: | ---: | ---: | --- |")
for c in counts:
    r = json.load(open(f"{out}/serve-{c}.json"))
    s = r["streams"]
    ok = [x for x in s if x["ok"]]
    tps = [x["decode_tps"] for x in ok]
    ttft = [x["ttft_s"] for x in ok]
    equal = sum(1 for x in ok if x["ids"] == ref)
    print(f"| {c} | {r['aggregate_tps']:.1f} | {pct(tps, 0.5):.1f} / {min(tps) if tps else 0:.1f} | "
          f"{pct(ttft, 0.5):.3f} / {pct(ttft, 0.9):.3f} / {pct(ttft, 0.99):.3f} | {r['failed']} | "
          f"{equal}/{len(s)} |")
PY
    (cd "$out" && tar -cf serve-json.tar serve-*.json serve-run.err && rm -f serve-*.json serve-run.err)
    ;;
  ab)
    knob="$1"; shift
    for spec in "$@"; do
      for v in 0 1; do
        echo "== $knob=$v $spec" | tee -a "$out/ab.log"
        (export "$knob=$v"; run_bench "$spec") 2>&1 | grep -E "^\|.*(pp|tg)[0-9]|peak VRAM" | tee -a "$out/ab.log"
      done
    done ;;
  cmd) "$@" ;;
  *) echo "usage: gpu_run.sh tests|bench|cmd ..." >&2; exit 2 ;;
esac
