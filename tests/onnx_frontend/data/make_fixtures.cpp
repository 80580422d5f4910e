// SPDX-License-Identifier: MIT
// Generates the small ONNX fixtures under tests/onnx_frontend/data/fuzz_regressions/ (seed_*.onnx),
// which seed the loader fuzzer (fuzz/model_loader_fuzz.cpp) and are loaded by
// io_fuzz_regression_test. Uses only the test wire writer, no protobuf:
//
//     clang++ -std=c++20 -I tests tests/onnx_frontend/data/make_fixtures.cpp -o /tmp/make_fixtures
//     /tmp/make_fixtures tests/onnx_frontend/data/fuzz_regressions
#include <cstdio>
#include <string>

#include "onnx_frontend/io_wire.hpp"

using namespace io_wire;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output folder>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  auto put = [&](const char* name, const std::string& bytes) { write_file(out / name, bytes); };

  put("seed_relu.onnx", model(relu_graph()));

  {  // Conv with weights as raw_data and typed fields, plus several data types.
    graph g;
    g.add_input(value_info("x", 1, {1, 1, 4, 4}));
    g.add_output(value_info("y", 1, {1, 1, 3, 3}));
    g.add_initializer(float_tensor("w", {1, 1, 2, 2}, {1, 2, 3, 4}));
    msg b = tensor("b", 1, {1});
    b.f32(tensor_f::float_data, 0.5f);
    g.add_initializer(b);
    msg q = tensor("q", 22, {3});
    q.varint(tensor_f::int32_data, 0xF1).varint(tensor_f::int32_data, 0x07);
    g.add_initializer(q);
    msg h = tensor("h", 10, {2});
    h.bytes(tensor_f::raw_data, std::string("\x00\x3c\x00\xc0", 4));
    g.add_initializer(h);
    msg f8 = tensor("f8", 19, {1});
    f8.varint(tensor_f::int32_data, 0x3C);
    g.add_initializer(f8);
    g.add_node(node("Conv", {"x", "w", "b"}, {"y"}, "conv", {attr_ints("kernel_shape", {2, 2})}));
    put("seed_conv_types.onnx", model(g));
  }
  {  // Constants in every attribute form (PaddleOCR style).
    graph g;
    g.add_input(value_info("x", 1, {2}));
    g.add_output(value_info("y", 1, {2}));
    g.add_node(
        node("Constant", {}, {"c0"}, "c0", {attr_tensor("value", float_tensor("", {2}, {1, 2}))}));
    g.add_node(node("Constant", {}, {"c1"}, "c1", {attr_float("value_float", 3.0f)}));
    g.add_node(node("Constant", {}, {"c2"}, "c2", {attr_floats("value_floats", {1.0f, 2.0f})}));
    g.add_node(node("Constant", {}, {"c3"}, "c3", {attr_int("value_int", 4)}));
    g.add_node(node("Constant", {}, {"c4"}, "c4", {attr_ints("value_ints", {1, 2})}));
    g.add_node(node("Add", {"x", "c0"}, {"t0"}, "add0"));
    g.add_node(node("Mul", {"t0", "c2"}, {"y"}, "mul0"));
    put("seed_constants.onnx", model(g));
  }
  {  // An If node with two subgraphs reading an outer-scope tensor.
    graph then_g;
    then_g.add_output(value_info("t_out", 1, {2}));
    then_g.add_node(node("Identity", {"x"}, {"t_out"}, "then_id"));
    graph else_g;
    else_g.add_output(value_info("e_out", 1, {2}));
    else_g.add_node(node("Neg", {"x"}, {"e_out"}, "else_neg"));
    graph g;
    g.add_input(value_info("x", 1, {2}));
    g.add_input(value_info("cond", 9, {}));
    g.add_output(value_info("y", 1, {2}));
    g.add_node(node("If", {"cond"}, {"y"}, "if0",
                    {attr_graph("then_branch", then_g.m), attr_graph("else_branch", else_g.m)}));
    put("seed_if.onnx", model(g, 8, {{"", 13}, {"com.microsoft", 1}}));
  }
  {  // IR 3: initializers also listed as graph inputs.
    graph g;
    g.add_input(value_info("x", 1, {2}));
    g.add_input(value_info("w", 1, {2}));
    g.add_initializer(float_tensor("w", {2}, {1, 2}));
    g.add_output(value_info("y", 1, {2}));
    g.add_node(node("Add", {"x", "w"}, {"y"}, "add"));
    put("seed_ir3.onnx", model(g, 3, {{"", 7}}));
  }
  {  // External data (fails without a folder, exercises the reference parser).
    graph g = relu_graph();
    msg w = tensor("w", 1, {2});
    external(w, "weights.bin", "0", "8");
    g.add_initializer(w);
    put("seed_external.onnx", model(g));
  }
  return 0;
}
