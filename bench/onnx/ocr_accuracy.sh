#!/bin/sh
# SPDX-License-Identifier: MIT
# Issue 7 "Proof": accuracy of a quantized PaddleOCR model (PP-OCRv4 det, or the mobile v2
# text-direction classifier with KIND=cls) against the float model, measured in ONNX Runtime 1.30,
# on rendered text (det: pages, cls: lines). For each calibration set (8 samples from each seed
# of CAL_SEEDS) the model is quantized once with CONFIG, and the quantized and float models are
# run in ORT on each evaluation set (16 samples from each seed of EVAL_SEEDS). Prints one line
# per (calibration, evaluation) pair: the mean and lowest cosine similarity of output 0 over the
# samples (quark_evaluate), then the mean over all pairs. Our runtime's figure on the first
# evaluation set comes from quark_quantize --eval-data.
#   bench/onnx/ocr_accuracy.sh BUILD_DIR CONFIG.json
#   BUILD_DIR: a build with quark_quantize, quark_render_text and quark_evaluate
#              (cmake --preset release -B build/release-native -DQUARK_NATIVE=ON, then
#               cmake --build build/release-native -j2 --target quark_quantize quark_render_text
#               quark_evaluate)
# Environment: KIND (det: 640x640 pages, or cls: 48x192 lines), SIZE (det only: 640), CAL_SEEDS
# ("0 50 60"), EVAL_SEEDS ("100 200 300"), QUARK_ORT_DIR (.cache/ort, where onnxruntime-node is
# installed), QUARK_MODEL (default: the KIND's model under .cache/models).
# docs/bench/quantizer.md has the figures: session 55 for det with
# examples/configs/paddleocr_det_a8w8_asym.json, session 56 for cls with the NPU presets.
set -eu
B=${1:?usage: ocr_accuracy.sh BUILD_DIR CONFIG.json}
C=${2:?usage: ocr_accuracy.sh BUILD_DIR CONFIG.json}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
KIND=${KIND:-det}
SIZE=${SIZE:-640}
case $KIND in
  det) M=${QUARK_MODEL:-$SRC/.cache/models/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx}
       SHAPE="page $SIZE $SIZE"; WHAT="det ${SIZE}x$SIZE"; UNIT=pages ;;
  cls) M=${QUARK_MODEL:-$SRC/.cache/models/ocr-models/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx}
       SHAPE="line 48 192"; WHAT="cls 48x192"; UNIT=lines ;;
  *) echo "ocr_accuracy.sh: KIND must be det or cls, not '$KIND'" >&2; exit 1 ;;
esac
CAL_SEEDS=${CAL_SEEDS:-0 50 60}
EVAL_SEEDS=${EVAL_SEEDS:-100 200 300}
export QUARK_ORT_DIR=${QUARK_ORT_DIR:-$SRC/.cache/ort}
Q=$B/examples/onnx/quark_quantize
R=$B/examples/onnx/quark_render_text
E=$B/examples/onnx/quark_evaluate
RUN="node $SRC/tests/ort/ort_run.js"
for f in "$Q" "$R" "$E" "$M" "$C"; do
  [ -e "$f" ] || { echo "ocr_accuracy.sh: $f does not exist" >&2; exit 1; }
done
[ -d "$QUARK_ORT_DIR/node_modules/onnxruntime-node" ] ||
  { echo "ocr_accuracy.sh: no onnxruntime-node under $QUARK_ORT_DIR" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT

# ort_outputs MODEL SAMPLES OUT: output 0 of MODEL in ORT for each sample, as OUT/<sample>.npy.
ort_outputs() {
  mkdir -p "$3"
  for p in $(ls "$2"); do
    mkdir -p "$W/one"
    $RUN "$1" "$W/one" "$2/$p/x.npy"
    set -- "$1" "$2" "$3" "$W"/one/*.npy
    [ $# -eq 4 ] || { echo "ocr_accuracy.sh: expected one output, got $(($# - 3))" >&2; exit 1; }
    mv "$4" "$3/$p.npy"
    rm -rf "$W/one"
  done
}

for s in $EVAL_SEEDS; do
  "$R" $SHAPE 16 "$W/eval$s" --seed "$s" --input x >/dev/null
  ort_outputs "$M" "$W/eval$s" "$W/float$s"
done
first_eval=$(echo "$EVAL_SEEDS" | cut -d' ' -f1)
echo "config $C, $WHAT, load $(cut -d' ' -f1-3 /proc/loadavg)"
sum=0
n=0
for c in $CAL_SEEDS; do
  "$R" $SHAPE 8 "$W/cal$c" --seed "$c" --input x >/dev/null
  start=$(date +%s)
  ours=$("$Q" "$M" "$W/q.onnx" --config "$C" --calib-data "$W/cal$c" \
    --eval-data "$W/eval$first_eval" --no-summary 2>&1 | awk '/Mean cos similarity/ { print $4 }')
  echo "calibration $UNIT $c-$((c + 7)): quantized in $(($(date +%s) - start)) s;" \
    "our runtime on $UNIT $first_eval-$((first_eval + 15)): $ours"
  for s in $EVAL_SEEDS; do
    rm -rf "$W/quant"
    ort_outputs "$W/q.onnx" "$W/eval$s" "$W/quant"
    set -- $("$E" --baseline "$W/float$s" --quantized "$W/quant" | awk '/cos similarity/ { print $4 }')
    echo "  ORT, evaluation $UNIT $s-$((s + 15)): mean cosine $1 (lowest $2)"
    sum=$(echo "$sum $1" | awk '{ printf "%.6f", $1 + $2 }')
    n=$((n + 1))
  done
done
echo "mean over $n pairs: $(echo "$sum $n" | awk '{ printf "%.4f", $1 / $2 }')"
