#!/usr/bin/env bash
# The README's second command: installs what is missing, then builds and runs
# every test. GPU tests (tag `gpu`) skip cleanly on machines without a GPU.
# With the CUDA toolkit present, the CUDA code is compiled too (sm_90 only),
# so it cannot rot unseen on GPU-less CI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh

jobs_flag=()
[[ -n "${MINFER_BAZEL_JOBS:-}" ]] && jobs_flag=(--jobs="$MINFER_BAZEL_JOBS")

bazel build "${jobs_flag[@]}" //...
bazel test "${jobs_flag[@]}" //...
if [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  echo "test.sh: CUDA toolkit found: building and testing with --config=cuda"
  bazel build "${jobs_flag[@]}" --config=cuda //... //cuda/...
  bazel test "${jobs_flag[@]}" --config=cuda //...
else
  echo "test.sh: no CUDA toolkit: skipped the --config=cuda build"
fi
