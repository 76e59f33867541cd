#!/usr/bin/env bash
# Sleep and wake of one model on the CPU (docs/benchmarks.md, issue 31):
# minferd's RSS awake and asleep at levels 1 and 2, `minferctl wake` times
# (three per level), and a 16-token greedy request to the sleeping model
# against the same request awake, with its ids compared.
set -u
M=$(realpath "${1:?usage: scripts/wake_bench.sh MODEL.gguf (after bazel build //daemon:minferd //client:minferctl)}")
cd "$(dirname "$0")/.."
D=bazel-bin/daemon/minferd
C=bazel-bin/client/minferctl
rm -f /tmp/wb-ready.json
$D --listen 127.0.0.1:50161 --metrics-listen 127.0.0.1:9565 --ready-file /tmp/wb-ready.json > /tmp/wb-minferd.log 2>&1 &
d=$!
for _ in $(seq 100); do [[ -f /tmp/wb-ready.json ]] && break; sleep 0.1; done
c() { $C --addr 127.0.0.1:50161 "$@"; }
c load m "$M" --backend cpu --ctx 4096 --parallel 4 -q
rss() { awk '/VmRSS/ {printf "%.0f MiB", $2/1024}' /proc/$d/status; }
gen() { c --json generate m "The quick brown fox jumps over the lazy dog" -n 16 --temp 0; }
gen > /tmp/wb-awake.json
echo "awake: RSS $(rss)"
for level in 1 2; do
  for i in 1 2 3; do
    c sleep m --level $level > /dev/null
    s=$(rss)
    w=$(c wake m)
    echo "level $level run $i: asleep RSS $s; $w"
  done
  c sleep m --level $level > /dev/null
  t0=$(date +%s.%N); gen > /tmp/wb-req.json; t1=$(date +%s.%N)
  t2=$(date +%s.%N); gen > /dev/null; t3=$(date +%s.%N)
  same=$(python3 -c "import json;a=json.load(open('/tmp/wb-awake.json'))['token_ids'];b=json.load(open('/tmp/wb-req.json'))['token_ids'];print('same ids' if a==b else 'DIFFERENT ids')")
  echo "level $level: request to the sleeping model $(awk "BEGIN{print $t1-$t0}") s, awake $(awk "BEGIN{print $t3-$t2}") s (16 tokens; $same)"
done
c status m | grep -E "sleep:|memory:"
kill -TERM $d; wait $d
