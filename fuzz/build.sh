#!/bin/sh
# Builds fuzz/model_loader_fuzz with clang 14 + libFuzzer + ASan/UBSan into $1 (default build/fuzz).
# Not part of the default CMake build.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/fuzz}
mkdir -p "$out"
flags="-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DONNX_ML=1 -DONNX_NAMESPACE=onnx -I$root/include -I$root/onnx_frontend/include -I$root/onnx_frontend/src"
for src in "$root"/onnx_frontend/src/io/*.cpp "$root"/onnx_frontend/src/version.cpp; do
  obj="$out/$(basename "$src" .cpp).o"
  # -fsanitize=fuzzer-no-link for library code: instrumented, but without libFuzzer's main.
  clang++ $(echo "$flags" | sed 's/fuzzer,/fuzzer-no-link,/') -c "$src" -o "$obj"
done
clang++ $flags "$root/fuzz/model_loader_fuzz.cpp" "$out"/*.o -lonnx -lonnx_proto -lprotobuf -lpthread \
  -o "$out/model_loader_fuzz"
echo "built $out/model_loader_fuzz"
