#!/usr/bin/env bash
# The README's second command: installs what is missing, then builds and runs
# every test. GPU tests (tag `gpu`) skip cleanly on machines without a GPU.
# With the CUDA toolkit present, the CUDA code is compiled too (sm_90 only),
# so it cannot rot unseen on GPU-less CI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh

flags=(--config=ci)
[[ -n "${MINFER_BAZEL_JOBS:-}" ]] && flags+=(--jobs="$MINFER_BAZEL_JOBS")

bazel build "${flags[@]}" //...
bazel test "${flags[@]}" //...
# Every library that reaches the static cudart must link statically: as a
# shared library (Bazel's dynamic-mode test builds) it would reference cudart
# symbols that only the binary's own static cudart provides, and the test
# would die at load time on a machine with a GPU toolkit.
not_static=$(bazel query '(attr(linkstatic, 0, kind("cc_library", rdeps(//..., @cuda_toolkit//:cudart_static))) except attr(srcs, "^\[\]$", //...)) intersect //...' 2>/dev/null)
if [[ -n "$not_static" ]]; then
  echo "test.sh: these libraries use CUDA and need linkstatic = True: $not_static" >&2
  exit 1
fi
# Every test belongs to one of the top-level suites (BUILD.bazel).
unsuited=$(bazel query 'tests(//...) except tests(//:cpu + //:daemon + //:compat + //:gpu)' 2>/dev/null)
if [[ -n "$unsuited" ]]; then
  echo "test.sh: these tests are in no top-level suite (BUILD.bazel): $unsuited" >&2
  exit 1
fi
# The layering (README, layout): the engine's libraries know nothing of the
# CUDA backend, the daemon or the client (binaries pick backends by linking
# them), and the client knows nothing of the engine.
upward=$(bazel query 'deps(//engine/... except //engine/tools/...) intersect (//cuda/... + //daemon/... + //client/...)' 2>/dev/null)
if [[ -n "$upward" ]]; then
  echo "test.sh: engine libraries depend on cuda/, daemon/ or client/: $upward" >&2
  exit 1
fi
client_engine=$(bazel query 'deps(//client/...) intersect //engine/...' 2>/dev/null)
if [[ -n "$client_engine" ]]; then
  echo "test.sh: client depends on engine/: $client_engine" >&2
  exit 1
fi
if [[ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  # The CUDA code and everything that links it: the kernels, the backend,
  # the binaries and the GPU tests (which skip without a device), and one
  # process test of the CUDA-linked minferd, which must serve on the CPU
  # where no GPU is found. The rest of the suite does not change with
  # --config=cuda (it ran above).
  echo "test.sh: CUDA toolkit found: building and testing with --config=cuda"
  cuda_targets=(//cuda/... //tests/cuda/... //engine/tools:minfer //daemon:minferd
                //client:minferctl //tests/daemon:minferd_process_test)
  bazel build "${flags[@]}" --config=cuda "${cuda_targets[@]}"
  bazel test "${flags[@]}" --config=cuda //tests/cuda/... //tests/daemon:minferd_process_test
else
  echo "test.sh: no CUDA toolkit: skipped the --config=cuda build"
fi
