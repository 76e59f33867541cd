#!/usr/bin/env bash
# Compiles one CUDA translation unit for minfer's --config=cuda build.
#
#   nvcc.sh ARCHS CCBIN OUT.o SRC.cu [extra nvcc flags...]
#
# ARCHS is the single architecture setting: "90" (the GPU machine, used by
# development and CI builds) or "all" (release: SASS for every architecture
# of sm_70 sm_80 sm_86 sm_89 sm_90 sm_100 sm_120 the toolkit accepts, plus
# PTX for the newest so later GPUs JIT it). A comma list like "80,90" also
# works. CCBIN pins nvcc's host compiler (MINFER_CUDA_CCBIN in the
# environment does the same); empty keeps nvcc's default.
#
# The extra flag --sm90a compiles sm_90 as the arch-specific sm_90a (wgmma,
# the Hopper kernels) and defines MINFER_SM90A for the unit's host code, so
# its launchers know the code is there; such a unit gets no PTX for sm_90a
# (arch-specific PTX runs nowhere else).
set -euo pipefail
archs="$1"; ccbin="$2"; out="$3"; src="$4"; shift 4
sm90a=0
extra=()
for f in "$@"; do
  if [[ "$f" == --sm90a ]]; then sm90a=1; else extra+=("$f"); fi
done

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
nvcc="$cuda_home/bin/nvcc"
if [[ ! -x "$nvcc" ]]; then
  echo "minfer: --config=cuda needs the CUDA toolkit, but nvcc was not found at $nvcc." >&2
  echo "minfer: install the CUDA 13 toolkit (or set CUDA_HOME), or build without --config=cuda." >&2
  exit 1
fi

[[ -z "$ccbin" ]] && ccbin="${MINFER_CUDA_CCBIN:-}"

accepted=" $("$nvcc" --list-gpu-code | tr '\n' ' ') "
wanted=()
case "$archs" in
  all) wanted=(70 80 86 89 90 100 120) ;;
  *) IFS=',' read -r -a wanted <<< "$archs" ;;
esac
flags=()
newest=""
for a in "${wanted[@]}"; do
  if [[ "$sm90a" == 1 && "$a" == 90 && "$accepted" == *" sm_90 "* ]]; then
    flags+=("-gencode" "arch=compute_90a,code=sm_90a" "-DMINFER_SM90A=1")
  elif [[ "$accepted" == *" sm_$a "* ]]; then
    flags+=("-gencode" "arch=compute_$a,code=sm_$a")
    newest="$a"
  elif [[ "$archs" != all ]]; then
    echo "minfer: this CUDA toolkit cannot compile for sm_$a (it accepts:$accepted)" >&2
    exit 1
  fi
done
if [[ -z "$newest" && "$sm90a" == 0 ]]; then
  echo "minfer: no requested GPU architecture ($archs) is supported by $nvcc" >&2
  exit 1
fi
# PTX for the newest architecture, so newer GPUs can JIT-compile it.
[[ -n "$newest" ]] && flags+=("-gencode" "arch=compute_$newest,code=compute_$newest")

cc_flags=()
[[ -n "$ccbin" ]] && cc_flags=("-ccbin" "$ccbin")

exec "$nvcc" "${cc_flags[@]}" -std=c++17 -O3 -lineinfo \
  -Xcompiler -fPIC -Xcompiler -Wall "${flags[@]}" -I. -isystem "$cuda_home/include" \
  "${extra[@]}" -c "$src" -o "$out"
