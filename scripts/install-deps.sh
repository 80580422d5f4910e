#!/usr/bin/env bash
# Installs every build and test dependency of quark-cpp from Debian 12 packages, plus the
# ONNX Runtime 1.30 oracle (npm package, CPU library inside) into a cache folder.
# Usage: scripts/install-deps.sh            (as root, or with sudo)
#        QUARK_CACHE=/path scripts/install-deps.sh
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${QUARK_CACHE:-$here/.cache}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
pkgs=(
  build-essential cmake ninja-build git ca-certificates curl
  clang libclang-rt-14-dev clang-format lld
  libeigen3-dev libxtensor-dev doctest-dev libbenchmark-dev
  libprotobuf-dev protobuf-compiler libonnx-dev
  nlohmann-json3-dev libcli11-dev zlib1g-dev
  libonnx-testdata
)
# Node.js: keep whatever node/npm the machine has (e.g. NodeSource's nodejs, which bundles npm and
# conflicts with Debian's npm package); install Debian's only when the commands are missing.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# ONNX Runtime for Node: the postinstall step downloads from outside, so it is skipped; the CPU
# library ships inside the package.
if [ ! -f "$cache/ort/node_modules/onnxruntime-node/package.json" ]; then
  mkdir -p "$cache/ort"
  (cd "$cache/ort" && [ -f package.json ] || echo '{"name":"quark-ort-oracle","private":true}' > "$cache/ort/package.json")
  (cd "$cache/ort" && npm install --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0 >/dev/null)
fi
echo "dependencies ready; ONNX Runtime oracle in $cache/ort"
