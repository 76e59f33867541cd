#!/usr/bin/env bash
# Builds llama.cpp's CUDA benchmarks (llama-bench, llama-batched-bench) for
# Hopper (sm_90a: the device tool's H100 and H200), so the GPU runs can put
# llama.cpp beside minfer on the same files (`gpu_run.sh llamacpp`).
#
# The source is the llama.cpp release that the npm package node-llama-cpp
# ships as a git bundle (third_party/npm/node_modules/node-llama-cpp/llama/
# gitRelease.bundle, installed by scripts/install_deps.sh): no network, and
# the same version the CPU oracle tests (tests/compat) run.
#
# Output: .llamacpp/llamacpp.tar.xz with bin/ (the two benchmarks) and lib/
# (libggml*, libllama). cuBLAS and the CUDA runtime are not packed: the GPU
# machine's toolkit has them (gpu_run.sh points LD_LIBRARY_PATH there).
# Takes long on 2 cores (ggml-cuda's template instances): run it in the
# background; MINFER_LLAMACPP_WORK (default /tmp/minfer-llamacpp) holds the
# build tree, so a second run only relinks. The executables link with
# --allow-shlib-undefined: libggml-cuda needs the driver's libcuda.so.1,
# which only the GPU machine has.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$root/third_party/npm/node_modules/node-llama-cpp/llama/gitRelease.bundle"
work="${MINFER_LLAMACPP_WORK:-/tmp/minfer-llamacpp}"
jobs="${MINFER_LLAMACPP_JOBS:-2}"
[[ -f "$bundle" ]] || { echo "llamacpp_build.sh: $bundle is missing: run scripts/install_deps.sh" >&2; exit 1; }
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] ||
  { echo "llamacpp_build.sh: no nvcc (the CUDA toolkit)" >&2; exit 1; }
export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$work"
if [[ ! -d "$work/src/.git" ]]; then
  git clone -q "$bundle" "$work/src"
fi
cmake -S "$work/src" -B "$work/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DGGML_NATIVE=OFF -DGGML_CPU_ALL_VARIANTS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined >/dev/null
ninja -C "$work/build" -j "$jobs" llama-bench llama-batched-bench
rm -rf "$work/pack" && mkdir -p "$work/pack/bin" "$work/pack/lib"
cp "$work/build/bin/llama-bench" "$work/build/bin/llama-batched-bench" "$work/pack/bin/"
find "$work/build" -name 'lib*.so*' \( -name 'libggml*' -o -name 'libllama*' \) -exec cp -P {} "$work/pack/lib/" \;
strip --strip-debug "$work/pack/bin/"* "$work/pack/lib/"* 2>/dev/null || true
mkdir -p "$root/.llamacpp"
tar -C "$work/pack" -cf - . | xz -T2 -6 > "$root/.llamacpp/llamacpp.tar.xz"
( cd "$work/src" && git log -1 --format='llama.cpp %H' ) > "$root/.llamacpp/VERSION"
du -sh "$root/.llamacpp"
