#!/bin/sh
# Builds the libFuzzer targets with clang 14 + libFuzzer + ASan/UBSan into $1 (default
# build/fuzz): model_loader_fuzz (the ONNX loader), config_fuzz (the JSON configuration) and
# npy_fuzz (the .npy / .npz readers). Not part of the default CMake build.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/fuzz}
mkdir -p "$out"
flags="-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DONNX_ML=1 -DONNX_NAMESPACE=onnx -I$root/include -I$root/onnx_frontend/include -I$root/onnx_frontend/src"
lib_flags=$(echo "$flags" | sed 's/fuzzer,/fuzzer-no-link,/')
# compile DIR SOURCES...: objects into $out/DIR, rebuilt when the source is newer.
compile() {
  sub=$1
  shift
  mkdir -p "$out/$sub"
  for src in "$@"; do
    obj="$out/$sub/$(basename "$src" .cpp).o"
    # -fsanitize=fuzzer-no-link for library code: instrumented, but without libFuzzer's main.
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ]; then
      clang++ $lib_flags -c "$src" -o "$obj"
    fi
  done
}
compile io "$root"/onnx_frontend/src/io/*.cpp "$root"/onnx_frontend/src/version.cpp
compile config "$root"/onnx_frontend/src/config/*.cpp
compile calib "$root"/onnx_frontend/src/quantizer/calib_data.cpp
libs="-lonnx -lonnx_proto -lprotobuf -lpthread"
clang++ $flags "$root/fuzz/model_loader_fuzz.cpp" "$out"/io/*.o $libs -o "$out/model_loader_fuzz"
clang++ $flags "$root/fuzz/config_fuzz.cpp" "$out"/config/*.o "$out"/io/*.o $libs \
  -o "$out/config_fuzz"
clang++ $flags "$root/fuzz/npy_fuzz.cpp" "$out"/calib/*.o "$out"/io/*.o $libs -o "$out/npy_fuzz"
echo "built $out/model_loader_fuzz $out/config_fuzz $out/npy_fuzz"
