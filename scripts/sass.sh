#!/usr/bin/env bash
# The SASS of one CUDA unit's kernels, on this machine, without a GPU: what
# ptxas made of a kernel, its instruction mix per opcode, and the same for
# its innermost loop (the loop a kernel spends its time in, for the GEMMs).
#
#   scripts/sass.sh FILE.cu [KERNEL_REGEX] [--dump] [--loop N]
#
# FILE.cu is compiled for sm_90a (MINFER_SM90A defined, as the build's
# --sm90a units are; SM=80 etc. in the environment picks another target).
# KERNEL_REGEX (Python syntax, matched against the mangled names; default:
# every kernel) picks the kernels; each gets its instruction count and
# opcode mix, then the same for each of its loops (a backward branch and
# the instructions it jumps over, 16 or more; innermost first, up to N,
# default 2).
# --dump also prints the selected kernels' SASS.
#
# Why this script: the CUDA 13 toolkit here has nvcc and ptxas but no
# cuobjdump or nvdisasm, and reading a kernel's SASS on the GPU machine
# costs device time (gpu_run.sh sass needs ncu). Debian's non-free
# nvidia-cuda-toolkit (CUDA 11.8) has an nvdisasm that decodes sm_90 code
# once the cubin's ELF header is given the older ABI's encoding of the
# architecture (the instructions are the same); the script fetches that one
# package with apt-get download into a cache of its own (no change to the
# system's apt sources, nothing installed) and extracts nvdisasm from it.
# Cubins of CUDA 13 keep the architecture as ABI version 8 and e_flags
# 0x6005a04 for sm_90a; nvdisasm 11.8 reads ABI 7 with e_flags 0x005a055a
# (sm 0x5a in bits 0-7 and 16-23, 64-bit addresses, unified textures).
# It warns about indirect branch targets it does not know; those lines are
# dropped. For instruction mixes and reading code, not for timing.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 ]] || usage
src="$1"; shift
regex="."
dump=0
loops=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dump) dump=1 ;;
    --loop) loops="$2"; shift ;;
    -h|--help) usage ;;
    *) regex="$1" ;;
  esac
  shift
done
[[ -f "$src" ]] || { echo "sass.sh: no such file: $src" >&2; exit 2; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/minfer/nvdisasm-11.8"
nvdisasm="$cache/usr/bin/nvdisasm"
if [[ ! -x "$nvdisasm" ]]; then
  echo "sass.sh: fetching Debian's nvidia-cuda-toolkit (non-free) for nvdisasm into $cache" >&2
  mkdir -p "$cache/apt/lists/partial" "$cache/deb"
  cat > "$cache/apt/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm non-free contrib main
EOF
  apt_opts=(-o "Dir::Etc::SourceList=$cache/apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
            -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache::archives=$cache/deb"
            -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1")
  apt-get "${apt_opts[@]}" -qq update >&2
  (cd "$cache/deb" && apt-get "${apt_opts[@]}" -qq download nvidia-cuda-toolkit >&2)
  dpkg -x "$cache"/deb/nvidia-cuda-toolkit_*.deb "$cache/x"
  mkdir -p "$cache/usr/bin"
  cp "$cache/x/usr/bin/nvdisasm" "$nvdisasm"
  rm -rf "$cache/x" "$cache/deb"
fi

nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
[[ -x "$nvcc" ]] || { echo "sass.sh: no nvcc at $nvcc (set CUDA_HOME)" >&2; exit 1; }
sm="${SM:-90a}"
defs=()
[[ "$sm" == 90a ]] && defs=(-DMINFER_SM90A=1)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# (The build's flags, cuda/build/nvcc.sh, so the code is the build's.)
"$nvcc" -std=c++17 -O3 -arch="sm_$sm" -I. "${defs[@]}" -cubin -o "$tmp/k.cubin" "$src"
python3 - "$tmp/k.cubin" "$tmp/k7.cubin" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
if b[8] == 8:  # the CUDA 12.8+ ABI: sm in bits 8-15 of e_flags
    sm = (struct.unpack_from('<I', b, 0x30)[0] >> 8) & 0xFF
    b[8] = 7
    struct.pack_into('<I', b, 0x30, sm | (sm << 16) | 0x500)
open(sys.argv[2], 'wb').write(b)
EOF
"$nvdisasm" -c "$tmp/k7.cubin" 2>/dev/null > "$tmp/k.sass" || true
[[ -s "$tmp/k.sass" ]] || { echo "sass.sh: nvdisasm produced nothing" >&2; exit 1; }
python3 - "$tmp/k.sass" "$regex" "$dump" "$loops" <<'EOF'
import collections, re, sys
path, regex, dump, max_loops = sys.argv[1], sys.argv[2], sys.argv[3] == '1', int(sys.argv[4])
funcs, cur = collections.OrderedDict(), None
ins_re = re.compile(r'^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?(.*)$')
for line in open(path):
    m = re.match(r'^\s*\.text\.(\S+):\s*$', line)
    if m:
        cur = m.group(1)
        funcs[cur] = {'lines': [], 'ins': [], 'labels': {}}
        continue
    if cur is None:
        continue
    f = funcs[cur]
    f['lines'].append(line.rstrip('\n'))
    m = re.match(r'^\s*(\.L_x_\d+):', line)
    if m:
        f['labels'][m.group(1)] = len(f['ins'])
        continue
    m = ins_re.match(line)
    if m:
        f['ins'].append((int(m.group(1), 16), m.group(2), m.group(4)))

def mix(ins):
    c = collections.Counter(op for _, op, _ in ins)
    return ', '.join(f'{op} {n}' for op, n in c.most_common())

shown = 0
for name, f in funcs.items():
    if not re.search(regex, name) or not f['ins']:
        continue
    shown += 1
    print(f'== {name}\n   {len(f["ins"])} instructions: {mix(f["ins"])}')
    loops = []
    for i, (_, op, rest) in enumerate(f['ins']):
        if op in ('BRA', 'JMP'):
            m = re.search(r'`\((\.L_x_\d+)\)', rest)
            if m and m.group(1) in f['labels'] and f['labels'][m.group(1)] <= i:
                loops.append((f['labels'][m.group(1)], i))
    # (Spin loops on an mbarrier or a trap are a few instructions: not the
    # loops that matter.)
    loops = [l for l in loops if l[1] - l[0] >= 15]
    loops.sort(key=lambda l: l[1] - l[0])
    for a, b in loops[:max_loops]:
        body = f['ins'][a:b + 1]
        print(f'   loop 0x{body[0][0]:x}..0x{body[-1][0]:x}: {len(body)} instructions: {mix(body)}')
    if dump:
        print('\n'.join(f['lines']))
if shown == 0:
    print(f'sass.sh: no kernel matches {regex!r}; kernels:', file=sys.stderr)
    for name in funcs:
        print('  ' + name, file=sys.stderr)
    sys.exit(1)
EOF
