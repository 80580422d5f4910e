// SPDX-License-Identifier: MIT
// The runtime's Einsum (runtime/ops_einsum.cpp) and Unique (runtime/ops_index.cpp) beyond the
// ONNX conformance data. Einsum: the GEMM path (batched, transposed operands in place, broadcast
// '...' of different ranks), the strided loop (float64, integers with wrap-around), implicit
// output, diagonals, summed subscripts, three operands, whitespace, empty ranges, and every
// equation error naming the node and the culprit. Unique: NaN and signed zeros, sorted and
// first-occurrence order, axis (negative, with dimensions before it), absent outputs, empty input,
// bad attributes. Expected values are worked out by hand in the comments.
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <doctest/doctest.h>

#include <quark/onnx/runtime.hpp>

#include "io_wire.hpp"
#include "runtime_test_util.hpp"

namespace w = io_wire;
using namespace runtime_test;

namespace {

constexpr int FLOAT = 1, UINT8 = 2, INT8 = 3, INT32 = 6, INT64 = 7, BOOL = 9, DOUBLE = 11;

const char* const names[] = {"a", "b", "c"};

/// y = Einsum(a[, b[, c]]) with the given equation; input i declared of element type elems[i]
/// (y of elems[0]), shapes free.
runtime einsum_model(std::string_view eq, const std::vector<int>& elems, bool with_eq = true) {
  w::graph g;
  for (std::size_t i = 0; i < elems.size(); ++i)
    g.add_input(w::value_info(names[i], elems[i], {}, false));
  g.add_output(w::value_info("y", elems[0], {}, false));
  // (w::node takes a fixed initializer list of inputs: this one is written field by field)
  w::msg node;
  for (std::size_t i = 0; i < elems.size(); ++i)
    node.bytes(1, names[i]);
  node.bytes(2, "y").bytes(3, "es").bytes(4, "Einsum");
  if (with_eq)
    node.sub(5, w::attr_string("equation", eq));
  g.add_node(node);
  return load(w::model(g, 8, {{"", 12}}));
}

std::map<std::string, tensor> feeds_of(const std::vector<tensor>& xs) {
  std::map<std::string, tensor> f;
  for (std::size_t i = 0; i < xs.size(); ++i)
    f.emplace(names[i], xs[i]);
  return f;
}

tensor einsum(std::string_view eq, const std::vector<tensor>& xs, int elem = FLOAT) {
  const runtime rt = einsum_model(eq, std::vector<int>(xs.size(), elem));
  return rt.run(feeds_of(xs)).at("y");
}

/// (b+1) * I4 for b = 0 .. batches-1, as [batches, 4, 4].
std::vector<float> scaled_identities(std::size_t batches) {
  std::vector<float> v(batches * 16, 0.0f);
  for (std::size_t b = 0; b < batches; ++b) {
    for (std::size_t i = 0; i < 4; ++i)
      v[b * 16 + i * 4 + i] = static_cast<float>(b + 1);
  }
  return v;
}

/// 0, 1, 2, ... (count values).
std::vector<float> ramp(std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i)
    v[i] = static_cast<float>(i);
  return v;
}

template <class T>
std::vector<double> as_doubles(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace

TEST_CASE("Einsum: bij,bjk->bik on the GEMM path") {
  // A[b] = (b+1) I4, B[b][j][k] = 16b + 4j + k, so C[b][i][k] = (b+1) (16b + 4i + k):
  // batch 0 is 0..15, batch 1 is 2 * (16..31) = 32, 34, ..., 62. (4 x 4 x 4 = 64 multiply-adds
  // per product: the GEMM threshold.)
  const tensor y =
      einsum("bij,bjk->bik", {f32({2, 4, 4}, scaled_identities(2)), f32({2, 4, 4}, ramp(32))});
  CHECK(y.shape() == shape_t{2, 4, 4});
  std::vector<float> want(32);
  for (std::size_t i = 0; i < 16; ++i) {
    want[i] = static_cast<float>(i);
    want[16 + i] = 2.0f * static_cast<float>(16 + i);
  }
  CHECK(values_of<float>(y) == want);
}

TEST_CASE("Einsum: bhqd,bhkd->bhqk reads the second operand transposed in place") {
  // a = ones, b[0][h][k][d] = 10h + k; y[0][h][q][k] = sum over 4 d of (10h + k) = 4 (10h + k):
  // every row of head 0 is 0, 4, 8, 12 and of head 1 is 40, 44, 48, 52.
  std::vector<float> bv(32);
  for (std::size_t h = 0; h < 2; ++h) {
    for (std::size_t k = 0; k < 4; ++k) {
      for (std::size_t d = 0; d < 4; ++d)
        bv[(h * 4 + k) * 4 + d] = static_cast<float>(10 * h + k);
    }
  }
  const tensor y = einsum("bhqd,bhkd->bhqk",
                          {f32({1, 2, 4, 4}, std::vector<float>(32, 1.0f)), f32({1, 2, 4, 4}, bv)});
  CHECK(y.shape() == shape_t{1, 2, 4, 4});
  std::vector<float> want;
  for (float h : {0.0f, 1.0f}) {
    for (int q = 0; q < 4; ++q) {
      for (float k : {0.0f, 1.0f, 2.0f, 3.0f})
        want.push_back(4.0f * (10.0f * h + k));
    }
  }
  CHECK(values_of<float>(y) == want);
}

TEST_CASE("Einsum: ji,jk->ik reads the first operand transposed in place") {
  // a[j][i] = j + 1 in column i = 0, else 0; b = ones. y[i][k] = sum_j a[j][i] = 1+2+3+4 = 10
  // for i = 0, else 0. (Reading a untransposed would give row sums instead: 1, 2, 3, 4 per row.)
  std::vector<float> av(16, 0.0f);
  for (std::size_t j = 0; j < 4; ++j)
    av[j * 4] = static_cast<float>(j + 1);
  const tensor y = einsum("ji,jk->ik", {f32({4, 4}, av), f32({4, 4}, std::vector<float>(16, 1))});
  std::vector<float> want(16, 0.0f);
  for (std::size_t k = 0; k < 4; ++k)
    want[k] = 10.0f;
  CHECK(values_of<float>(y) == want);
}

TEST_CASE("Einsum: ...ij,...jk->...ik broadcasts '...' parts of different ranks") {
  // a: [2,1,4,4] with a[p][0] = (p+1) I4; b: [3,4,4] with b[e][j][k] = 16e + 4j + k. The '...'
  // parts [2,1] and [3] broadcast to [2,3]: y[p][e][i][k] = (p+1) (16e + 4i + k).
  // float32 takes the GEMM path (rows p and i: 8 x 4 x 4), float64 the strided loop.
  std::vector<double> want;
  for (std::size_t p = 0; p < 2; ++p) {
    for (std::size_t e = 0; e < 3; ++e) {
      for (std::size_t i = 0; i < 4; ++i) {
        for (std::size_t k = 0; k < 4; ++k)
          want.push_back(static_cast<double>((p + 1) * (16 * e + 4 * i + k)));
      }
    }
  }
  const auto a = scaled_identities(2);
  const auto b = ramp(48);
  const tensor y = einsum("...ij,...jk->...ik", {f32({2, 1, 4, 4}, a), f32({3, 4, 4}, b)});
  CHECK(y.shape() == shape_t{2, 3, 4, 4});
  CHECK(as_doubles(values_of<float>(y)) == want);
  const tensor y64 =
      einsum("...ij,...jk->...ik",
             {f64({2, 1, 4, 4}, as_doubles(a)), f64({3, 4, 4}, as_doubles(b))}, DOUBLE);
  CHECK(y64.shape() == shape_t{2, 3, 4, 4});
  CHECK(values_of<double>(y64) == want);
}

TEST_CASE("Einsum: a summed subscript of one operand only is summed before the GEMM") {
  // "bij,bjk->bk": a = ones [1,2,8], so summing i gives 2 for every j; b[0][j][k] = j.
  // y[0][k] = sum_j 2 j = 2 * 28 = 56 for every k.
  std::vector<float> bv(64);
  for (std::size_t j = 0; j < 8; ++j) {
    for (std::size_t k = 0; k < 8; ++k)
      bv[j * 8 + k] = static_cast<float>(j);
  }
  const tensor y =
      einsum("bij,bjk->bk", {f32({1, 2, 8}, std::vector<float>(16, 1.0f)), f32({1, 8, 8}, bv)});
  CHECK(y.shape() == shape_t{1, 8});
  CHECK(values_of<float>(y) == std::vector<float>(8, 56.0f));
}

TEST_CASE("Einsum: the GEMM path agrees with a plain reference on irregular values") {
  // A plain four-deep loop in double is the reference; GEMM sums in float, hence the tolerance.
  const std::size_t B = 2, H = 3, Q = 5, K = 7, D = 6;
  std::vector<float> a(B * H * Q * D), b(B * H * K * D);
  for (std::size_t i = 0; i < a.size(); ++i)
    a[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>((i * 53) % 13) * 0.25f - 1.5f;
  const tensor y = einsum("bhqd,bhkd->bhqk", {f32({2, 3, 5, 6}, a), f32({2, 3, 7, 6}, b)});
  REQUIRE(y.shape() == shape_t{2, 3, 5, 7});
  const auto got = values_of<float>(y);
  for (std::size_t bh = 0; bh < B * H; ++bh) {
    for (std::size_t q = 0; q < Q; ++q) {
      for (std::size_t k = 0; k < K; ++k) {
        double ref = 0.0;
        for (std::size_t d = 0; d < D; ++d) {
          ref += static_cast<double>(a[(bh * Q + q) * D + d]) *
                 static_cast<double>(b[(bh * K + k) * D + d]);
        }
        CHECK(static_cast<double>(got[(bh * Q + q) * K + k]) == doctest::Approx(ref));
      }
    }
  }
}

TEST_CASE("Einsum: implicit output (letters seen once, ASCII order, '...' first)") {
  const tensor m12 = f32({2, 2}, {1, 2, 3, 4});
  const tensor m56 = f32({2, 2}, {5, 6, 7, 8});
  // "ba" -> "ab": the transpose of [[1,2,3],[4,5,6]] is [[1,4],[2,5],[3,6]].
  tensor y = einsum("ba", {f32({2, 3}, {1, 2, 3, 4, 5, 6})});
  CHECK(y.shape() == shape_t{3, 2});
  CHECK(values_of<float>(y) == std::vector<float>{1, 4, 2, 5, 3, 6});
  // "ii" -> "": the trace 1 + 4 = 5, a scalar.
  y = einsum("ii", {m12});
  CHECK(y.shape() == shape_t{});
  CHECK(values_of<float>(y) == std::vector<float>{5});
  // "ij,jk" -> "ik": [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]].
  y = einsum("ij,jk", {m12, m56});
  CHECK(values_of<float>(y) == std::vector<float>{19, 22, 43, 50});
  // "kb,bA" -> "Ak" (uppercase sorts first): y[A][k] = sum_b x1[k][b] x2[b][A], the transpose
  // of the product above: [[19,43],[22,50]].
  y = einsum("kb,bA", {m12, m56});
  CHECK(values_of<float>(y) == std::vector<float>{19, 43, 22, 50});
  // "ij,ij" -> "": 1*5 + 2*6 + 3*7 + 4*8 = 70.
  y = einsum("ij,ij", {m12, m56});
  CHECK(y.shape() == shape_t{});
  CHECK(values_of<float>(y) == std::vector<float>{70});
  // "...ba" -> "...ab": a transpose per '...' index, shape [1,3,2].
  y = einsum("...ba", {f32({1, 2, 3}, {1, 2, 3, 4, 5, 6})});
  CHECK(y.shape() == shape_t{1, 3, 2});
  CHECK(values_of<float>(y) == std::vector<float>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("Einsum: diagonals, summed subscripts and whitespace (float64)") {
  const tensor m = f64({2, 2}, {1, 2, 3, 4});
  // the diagonal of [[1,2],[3,4]]: 1, 4
  CHECK(values_of<double>(einsum("ii->i", {m}, DOUBLE)) == std::vector<double>{1, 4});
  // x = 0..7 as [2,2,2]: x[0][0][j] = 0, 1 and x[1][1][j] = 6, 7; summed over i: 6, 8
  CHECK(values_of<double>(einsum("iij->j", {f64({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})}, DOUBLE)) ==
        std::vector<double>{6, 8});
  // every element: 10; column sums: 4, 6
  CHECK(values_of<double>(einsum("ij->", {m}, DOUBLE)) == std::vector<double>{10});
  CHECK(values_of<double>(einsum("ij->j", {m}, DOUBLE)) == std::vector<double>{4, 6});
  // '...' missing from an explicit output: its dimensions are summed like a dropped letter
  CHECK(values_of<double>(einsum("...i->i", {m}, DOUBLE)) == std::vector<double>{4, 6});
  // spaces anywhere: the transpose [[1,3],[2,4]]
  CHECK(values_of<double>(einsum(" i j -> j i ", {m}, DOUBLE)) == std::vector<double>{1, 3, 2, 4});
}

TEST_CASE("Einsum: three operands, outer product") {
  // [[1,2]] x [[1,1],[0,1]] = [[1,3]]; x [[3],[4]] = 1*3 + 3*4 = 15
  tensor y =
      einsum("ij,jk,kl->il", {f32({1, 2}, {1, 2}), f32({2, 2}, {1, 1, 0, 1}), f32({2, 1}, {3, 4})});
  CHECK(y.shape() == shape_t{1, 1});
  CHECK(values_of<float>(y) == std::vector<float>{15});
  // 1*4*1 + 2*5*1 + 3*6*2 = 4 + 10 + 36 = 50
  y = einsum("i,i,i->", {f32({3}, {1, 2, 3}), f32({3}, {4, 5, 6}), f32({3}, {1, 1, 2})});
  CHECK(values_of<float>(y) == std::vector<float>{50});
  // i and k stay alive after the first pair because the third operand uses them:
  // y[j] = sum_{i,k} a[i][j] b[k] c[i][k] with c = I2 is sum_i a[i][j] b[i]:
  // j = 0: 1*1 + 3*10 = 31, j = 1: 2*1 + 4*10 = 42
  y = einsum("ij,k,ik->j",
             {f32({2, 2}, {1, 2, 3, 4}), f32({2}, {1, 10}), f32({2, 2}, {1, 0, 0, 1})});
  CHECK(values_of<float>(y) == std::vector<float>{31, 42});
  // [1,2] outer [3,4,5]: [[3,4,5],[6,8,10]]
  y = einsum("i,j->ij", {f32({2}, {1, 2}), f32({3}, {3, 4, 5})});
  CHECK(y.shape() == shape_t{2, 3});
  CHECK(values_of<float>(y) == std::vector<float>{3, 4, 5, 6, 8, 10});
}

TEST_CASE("Einsum: integer types wrap like the integer arithmetic of their type") {
  // int32 matmul: [[1,2],[3,4]] x [[5,6],[7,8]] = [[19,22],[43,50]]
  tensor y = einsum("ij,jk->ik", {i32({2, 2}, {1, 2, 3, 4}), i32({2, 2}, {5, 6, 7, 8})}, INT32);
  CHECK(values_of<std::int32_t>(y) == std::vector<std::int32_t>{19, 22, 43, 50});
  // int64 column sums of [[1,-2],[3,-4]]: 4, -6
  y = einsum("ij->j", {i64({2, 2}, {1, -2, 3, -4})}, INT64);
  CHECK(values_of<std::int64_t>(y) == std::vector<std::int64_t>{4, -6});
  // uint8: 200*2 + 100*1 = 500 = 244 modulo 256
  y = einsum("i,i->",
             {make<std::uint8_t>(dtype_id::uint8, {2}, {200, 100}),
              make<std::uint8_t>(dtype_id::uint8, {2}, {2, 1})},
             UINT8);
  CHECK(values_of<std::uint8_t>(y) == std::vector<std::uint8_t>{244});
  // int8: (-128) * (-1) = 128, which wraps to -128
  y = einsum("i,i->i",
             {make<std::int8_t>(dtype_id::int8, {1}, {-128}),
              make<std::int8_t>(dtype_id::int8, {1}, {-1})},
             INT8);
  CHECK(values_of<std::int8_t>(y) == std::vector<std::int8_t>{-128});
}

TEST_CASE("Einsum: empty ranges give zeros or empty outputs") {
  // j has extent 0: every sum is empty, so y = zeros [2,3]
  tensor y = einsum("ij,jk->ik", {f32({2, 0}, {}), f32({0, 3}, {})});
  CHECK(y.shape() == shape_t{2, 3});
  CHECK(values_of<float>(y) == std::vector<float>(6, 0.0f));
  // the sum of no elements is 0
  y = einsum("i->", {f32({0}, {})});
  CHECK(values_of<float>(y) == std::vector<float>{0});
  // an empty batch: shape [0,2,2]
  y = einsum("bij,bjk->bik", {f32({0, 2, 2}, {}), f32({0, 2, 2}, {})});
  CHECK(y.shape() == shape_t{0, 2, 2});
}

TEST_CASE("Einsum: an output subscript of extent 0 in one operand only gives an empty output") {
  // k has extent 0 and only b has it: the pairwise contraction's extent of k is 0, not 1 (it
  // used to be max(1, 0), and the loop read 10 elements of b's empty buffer).
  for (int elem : {DOUBLE, FLOAT}) {
    CAPTURE(elem);
    const tensor a = elem == DOUBLE ? f64({5, 2, 3}, std::vector<double>(30, 1.0))
                                    : f32({5, 2, 3}, std::vector<float>(30, 1.0f));
    const tensor b = elem == DOUBLE ? f64({5, 3, 0}, {}) : f32({5, 3, 0}, {});
    const tensor y = einsum("bij, bjk -> bik", {a, b}, elem);
    CHECK(y.shape() == shape_t{5, 2, 0});
    CHECK(y.size() == 0);
  }
  // the same with k in the first operand only
  const tensor y = einsum("bkj,bji->bik", {f32({2, 0, 3}, {}), f32({2, 3, 4}, ramp(24))});
  CHECK(y.shape() == shape_t{2, 4, 0});
}

TEST_CASE("Einsum: a bad equation or bad operands fail naming the node and the culprit") {
  const tensor m23 = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const tensor m42 = f32({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  struct bad {
    const char* eq;
    std::vector<tensor> xs;
    const char* message;
  };
  const std::vector<bad> cases = {
      {"ij,jk->i.k", {m23, m23}, "a '.' outside an ellipsis '...' in term 'i.k'"},
      {"ij->ji->ij", {m23}, "more than one '->'"},
      {"i$j->ij", {m23}, "unexpected character '$' in term 'i$j'"},
      {"...i...->i", {m23}, "more than one ellipsis in term '...i...'"},
      {"ij,jk->ik", {m23}, "has 2 operand terms for 1 inputs"},
      {"ij,jk->ik", {m23, m42}, "subscript 'j' of equation 'ij,jk->ik' is bound to sizes 3"},
      {"ijk->i", {m23}, "term 'ijk' of equation 'ijk->i' needs rank 3, input 'a' has shape [2,3]"},
      {"...ijk->i", {m23}, "needs rank >= 3"},
      {"ij->k", {m23}, "output subscript 'k' of equation 'ij->k' appears in no input term"},
      {"ij->ii", {m23}, "output subscript 'i' is repeated"},
      {"ij,ij->i,j", {m23, m23}, "a ',' in the output term"},
      {"...i,...i->...i", {m23, m42}, "'...' dimensions of input 'a' [2,3] and input 'b' [4,2]"},
      {"ij,jk->ik", {m23, i64({3, 1}, {1, 2, 3})}, "input 'b' is int64, input 'a' is float32"},
  };
  for (const auto& k : cases) {
    CAPTURE(k.eq);
    std::vector<int> elems;
    for (const tensor& x : k.xs)
      elems.push_back(x.type() == dtype_id::int64 ? INT64 : FLOAT);
    const runtime rt = einsum_model(k.eq, elems);
    const std::string e = run_error(rt, feeds_of(k.xs));
    CAPTURE(e);
    CHECK(has(e, "'es'"));
    CHECK(has(e, "Einsum"));
    CHECK(has(e, k.message));
  }
  // no equation attribute at all
  const runtime rt = einsum_model("", {FLOAT}, false);
  const std::string e = run_error(rt, feeds_of({m23}));
  CHECK(has(e, "'es'"));
  CHECK(has(e, "attribute 'equation' is required"));
}

// ---- Unique --------------------------------------------------------------------------------

namespace {

/// y, indices, inverse_indices, counts = Unique(x) with the given attributes and output names.
runtime unique_model(int elem, std::initializer_list<w::msg> attrs,
                     std::initializer_list<std::string_view> outputs = {"y", "idx", "inv", "cnt"}) {
  w::graph g;
  g.add_input(w::value_info("x", elem, {}, false));
  for (const auto o : outputs) {
    if (!o.empty())
      g.add_output(w::value_info(o, o == "y" ? elem : INT64, {}, false));
  }
  g.add_node(w::node("Unique", {"x"}, outputs, "un", attrs));
  return load(w::model(g, 8, {{"", 11}}));
}

}  // namespace

TEST_CASE("Unique: NaN equals NaN and sorts last, -0 and 0 are one value, both orders") {
  const float nan = std::nanf("");
  // x = [2, NaN, 1, 2, NaN, -0, 0]; groups: zero {5 (-0), 6}, 1 {2}, 2 {0, 3}, NaN {1, 4}
  const tensor x = f32({7}, {2, nan, 1, 2, nan, -0.0f, 0.0f});
  for (std::int64_t sorted : {1, 0}) {
    CAPTURE(sorted);
    const runtime rt = unique_model(FLOAT, {w::attr_int("sorted", sorted)});
    const auto out = rt.run({{"x", x}});
    const auto y = values_of<float>(out.at("y"));
    REQUIRE(y.size() == 4);
    if (sorted) {
      // ascending, NaN last: -0 (first of the zeros), 1, 2, NaN
      CHECK((y[0] == 0.0f && std::signbit(y[0])));
      CHECK(y[1] == 1.0f);
      CHECK(y[2] == 2.0f);
      CHECK(std::isnan(y[3]));
      CHECK(values_of<std::int64_t>(out.at("idx")) == std::vector<std::int64_t>{5, 2, 0, 1});
      CHECK(values_of<std::int64_t>(out.at("inv")) ==
            std::vector<std::int64_t>{2, 3, 1, 2, 3, 0, 0});
      CHECK(values_of<std::int64_t>(out.at("cnt")) == std::vector<std::int64_t>{2, 1, 2, 2});
    } else {
      // first occurrence: 2 (at 0), NaN (1), 1 (2), -0 (5)
      CHECK(y[0] == 2.0f);
      CHECK(std::isnan(y[1]));
      CHECK(y[2] == 1.0f);
      CHECK((y[3] == 0.0f && std::signbit(y[3])));
      CHECK(values_of<std::int64_t>(out.at("idx")) == std::vector<std::int64_t>{0, 1, 2, 5});
      CHECK(values_of<std::int64_t>(out.at("inv")) ==
            std::vector<std::int64_t>{0, 1, 2, 0, 1, 3, 3});
      CHECK(values_of<std::int64_t>(out.at("cnt")) == std::vector<std::int64_t>{2, 2, 1, 2});
    }
  }
}

TEST_CASE("Unique: rows of an int64 matrix along axis 0, sorted and by first occurrence") {
  // rows: r0 [1,0], r1 [0,1], r2 [1,0], r3 [0,0]
  const tensor x = i64({4, 2}, {1, 0, 0, 1, 1, 0, 0, 0});
  for (std::int64_t sorted : {1, 0}) {
    CAPTURE(sorted);
    const runtime rt = unique_model(INT64, {w::attr_int("sorted", sorted), w::attr_int("axis", 0)});
    const auto out = rt.run({{"x", x}});
    CHECK(out.at("y").shape() == shape_t{3, 2});
    if (sorted) {
      // lexicographic: [0,0] (r3), [0,1] (r1), [1,0] (r0, r2)
      CHECK(values_of<std::int64_t>(out.at("y")) == std::vector<std::int64_t>{0, 0, 0, 1, 1, 0});
      CHECK(values_of<std::int64_t>(out.at("idx")) == std::vector<std::int64_t>{3, 1, 0});
      CHECK(values_of<std::int64_t>(out.at("inv")) == std::vector<std::int64_t>{2, 1, 2, 0});
      CHECK(values_of<std::int64_t>(out.at("cnt")) == std::vector<std::int64_t>{1, 1, 2});
    } else {
      // first occurrence: [1,0] (r0), [0,1] (r1), [0,0] (r3)
      CHECK(values_of<std::int64_t>(out.at("y")) == std::vector<std::int64_t>{1, 0, 0, 1, 0, 0});
      CHECK(values_of<std::int64_t>(out.at("idx")) == std::vector<std::int64_t>{0, 1, 3});
      CHECK(values_of<std::int64_t>(out.at("inv")) == std::vector<std::int64_t>{0, 1, 0, 2});
      CHECK(values_of<std::int64_t>(out.at("cnt")) == std::vector<std::int64_t>{2, 1, 1});
    }
  }
}

TEST_CASE("Unique: columns along axis 1 and -1 compare lexicographically down the column") {
  // columns of [[1,1,0],[5,2,9]]: c0 (1,5), c1 (1,2), c2 (0,9); sorted: c2, c1, c0 (c1 before
  // c0 is decided by the second element)
  const tensor x = i32({2, 3}, {1, 1, 0, 5, 2, 9});
  for (std::int64_t axis : {1, -1}) {
    CAPTURE(axis);
    const runtime rt = unique_model(INT32, {w::attr_int("axis", axis)});
    const auto out = rt.run({{"x", x}});
    CHECK(out.at("y").shape() == shape_t{2, 3});
    CHECK(values_of<std::int32_t>(out.at("y")) == std::vector<std::int32_t>{0, 1, 1, 9, 2, 5});
    CHECK(values_of<std::int64_t>(out.at("idx")) == std::vector<std::int64_t>{2, 1, 0});
    CHECK(values_of<std::int64_t>(out.at("inv")) == std::vector<std::int64_t>{2, 1, 0});
    CHECK(values_of<std::int64_t>(out.at("cnt")) == std::vector<std::int64_t>{1, 1, 1});
  }
}

TEST_CASE("Unique: absent outputs, uint8 and bool inputs, empty input") {
  // only y and inverse_indices wanted; x = [3, 1, 3] as uint8: y = [1, 3], inverse [1, 0, 1]
  {
    const runtime rt = unique_model(UINT8, {}, {"y", "", "inv"});
    const auto out = rt.run({{"x", make<std::uint8_t>(dtype_id::uint8, {3}, {3, 1, 3})}});
    CHECK(values_of<std::uint8_t>(out.at("y")) == std::vector<std::uint8_t>{1, 3});
    CHECK(values_of<std::int64_t>(out.at("inv")) == std::vector<std::int64_t>{1, 0, 1});
    CHECK(out.count("idx") == 0);
  }
  // bool [true, false, true]: y = [false, true], counts [1, 2]
  {
    const runtime rt = unique_model(BOOL, {});
    const auto out = rt.run({{"x", make<bool>(dtype_id::boolean, {3}, {true, false, true})}});
    CHECK(values_of<bool>(out.at("y")) == std::vector<bool>{false, true});
    CHECK(values_of<std::int64_t>(out.at("cnt")) == std::vector<std::int64_t>{1, 2});
  }
  // no element: every output is empty
  {
    const runtime rt = unique_model(FLOAT, {});
    const auto out = rt.run({{"x", f32({0}, {})}});
    CHECK(out.at("y").shape() == shape_t{0});
    CHECK(out.at("idx").shape() == shape_t{0});
    CHECK(out.at("inv").shape() == shape_t{0});
    CHECK(out.at("cnt").shape() == shape_t{0});
  }
  // [0,3] along axis 1: three columns, each the empty sequence, so all equal: one group that
  // starts at column 0 and holds 3; y keeps its 0 rows: [0,1]
  {
    const runtime rt = unique_model(FLOAT, {w::attr_int("axis", 1)});
    const auto out = rt.run({{"x", f32({0, 3}, {})}});
    CHECK(out.at("y").shape() == shape_t{0, 1});
    CHECK(values_of<std::int64_t>(out.at("idx")) == std::vector<std::int64_t>{0});
    CHECK(values_of<std::int64_t>(out.at("inv")) == std::vector<std::int64_t>{0, 0, 0});
    CHECK(values_of<std::int64_t>(out.at("cnt")) == std::vector<std::int64_t>{3});
  }
}

TEST_CASE("Unique: a bad sorted value or axis fails naming the node") {
  const tensor x = f32({2, 2}, {1, 2, 3, 4});
  std::string e = run_error(unique_model(FLOAT, {w::attr_int("sorted", 2)}), {{"x", x}});
  CAPTURE(e);
  CHECK(has(e, "'un'"));
  CHECK(has(e, "Unique"));
  CHECK(has(e, "attribute 'sorted' is 2, expected 0 or 1"));
  e = run_error(unique_model(FLOAT, {w::attr_int("axis", 2)}), {{"x", x}});
  CHECK(has(e, "'un'"));
  CHECK(has(e, "axis 2 out of range for rank 2"));
  e = run_error(unique_model(FLOAT, {w::attr_int("axis", -3)}), {{"x", x}});
  CHECK(has(e, "axis -3 out of range for rank 2"));
}
