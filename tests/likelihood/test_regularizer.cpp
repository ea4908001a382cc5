// SPDX-License-Identifier: MIT
// Regularizers: hand-computed penalties, an explicit padded-grid reference, and derivatives against finite differences.
#include <catch2/catch.hpp>

#include <fitlib/likelihood/regularizer.hpp>

#include "random_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace fitlib;
using fitlib::test::central_difference;
using fitlib::test::rel_error;

namespace {

using Vec = std::vector<double>;

template <class Penalty>
double value_of(const Penalty& reg, const Vec& z) { return reg.value_grad(z, {}); }

template <class Penalty>
Vec gradient_of(const Penalty& reg, const Vec& z) {
  Vec g(z.size(), 0.0);
  reg.value_grad(z, g);
  return g;
}

/// The SVD penalty the slow, literal way: copy r into a grid padded by one cell on every side
/// (numpy.pad mode 'symmetric', width 1: the outside cell repeats the edge cell), then apply the
/// 2N+1-point Laplacian stencil at every unpadded cell.
double svd_brute_force(const std::vector<index_t>& shape, const Vec& ref, const Vec& o, double tau) {
  const std::size_t nd = shape.size();
  std::vector<index_t> pext(nd), pstride(nd), stride(nd);
  index_t total = 1, n = 1;
  for (std::size_t a = nd; a-- > 0;) {
    pext[a] = shape[a] + 2;
    pstride[a] = total;
    stride[a] = n;
    total *= pext[a];
    n *= shape[a];
  }
  Vec r(static_cast<std::size_t>(n));
  for (std::size_t b = 0; b < r.size(); ++b) r[b] = ref[b] == 0.0 ? 1.0 : o[b] / ref[b];
  Vec padded(static_cast<std::size_t>(total));
  for (index_t p = 0; p < total; ++p) {
    index_t src = 0;
    for (std::size_t a = 0; a < nd; ++a) {
      const index_t coord = (p / pstride[a]) % pext[a] - 1;
      src += std::clamp<index_t>(coord, 0, shape[a] - 1) * stride[a];
    }
    padded[static_cast<std::size_t>(p)] = r[static_cast<std::size_t>(src)];
  }
  double sum = 0.0;
  for (index_t c = 0; c < n; ++c) {
    index_t p = 0;
    for (std::size_t a = 0; a < nd; ++a) p += ((c / stride[a]) % shape[a] + 1) * pstride[a];
    double lap = -2.0 * static_cast<double>(nd) * padded[static_cast<std::size_t>(p)];
    for (std::size_t a = 0; a < nd; ++a)
      lap += padded[static_cast<std::size_t>(p - pstride[a])] + padded[static_cast<std::size_t>(p + pstride[a])];
    sum += lap * lap;
  }
  return std::exp(2.0 * tau) * sum;
}

/// Gradient and Hessian-vector products against central differences, the dense Hessian against
/// hessp on unit vectors, its symmetry, and that every output is added to rather than overwritten.
/// Penalty: either kind (ParameterPenalty or ObservablePenalty), z the point it reads.
template <class Penalty>
void check_derivatives(const Penalty& reg, const Vec& z, double h, std::mt19937_64& rng) {
  const index_t n = static_cast<index_t>(z.size());
  const auto nu = static_cast<std::size_t>(n);
  auto value = [&](const Vec& y) { return Vec{value_of(reg, y)}; };
  auto gradient = [&](const Vec& y) { return gradient_of(reg, y); };

  // Gradient, added onto what is there.
  Vec g(nu, 1.5);
  const double f = reg.value_grad(z, g);
  for (double& gi : g) gi -= 1.5;
  CHECK(f == value_of(reg, z));
  Vec g_fd(nu);
  for (index_t i = 0; i < n; ++i) {
    Vec e(nu, 0.0);
    e[static_cast<std::size_t>(i)] = 1.0;
    g_fd[static_cast<std::size_t>(i)] = central_difference(value, z, e, h)[0];
  }
  CHECK(rel_error(g, g_fd) < 1e-8);

  // Hessian-vector products for a block of three directions with ld > rows.
  const index_t nv = 3, ld = n + 2;
  std::normal_distribution<double> normal;
  Vec V(static_cast<std::size_t>(ld * nv), 99.0), HV(static_cast<std::size_t>(ld * nv), 0.5);
  for (index_t k = 0; k < nv; ++k)
    for (index_t i = 0; i < n; ++i) V[static_cast<std::size_t>(i + k * ld)] = normal(rng);
  reg.hessp(z, ConstBlockView<double>(V.data(), n, nv, ld), BlockView<double>(HV.data(), n, nv, ld));
  for (index_t k = 0; k < nv; ++k) {
    Vec vk(V.begin() + k * ld, V.begin() + k * ld + n), hvk(nu);
    for (index_t i = 0; i < n; ++i) hvk[static_cast<std::size_t>(i)] = HV[static_cast<std::size_t>(i + k * ld)] - 0.5;
    INFO("direction " << k);
    CHECK(rel_error(hvk, central_difference(gradient, z, vk, h)) < 1e-8);
    for (index_t i = n; i < ld; ++i) CHECK(HV[static_cast<std::size_t>(i + k * ld)] == 0.5);  // padding untouched
  }

  // Dense Hessian, added onto what is there, against hessp on the identity.
  const index_t ldh = n + 1;
  Vec H(static_cast<std::size_t>(ldh * n), 0.25), I(nu * nu, 0.0), HI(nu * nu, 0.0);
  reg.add_hessian(z, BlockView<double>(H.data(), n, n, ldh));
  for (index_t i = 0; i < n; ++i) I[static_cast<std::size_t>(i + i * n)] = 1.0;
  reg.hessp(z, ConstBlockView<double>(I.data(), n, n), BlockView<double>(HI.data(), n, n));
  double hmax = 0.0;
  for (double x : HI) hmax = std::max(hmax, std::abs(x));
  REQUIRE(hmax > 0.0);
  double diff = 0.0, asym = 0.0;
  for (index_t j = 0; j < n; ++j)
    for (index_t i = 0; i < n; ++i) {
      const double hij = H[static_cast<std::size_t>(i + j * ldh)] - 0.25;
      const double hji = H[static_cast<std::size_t>(j + i * ldh)] - 0.25;
      diff = std::max(diff, std::abs(hij - HI[static_cast<std::size_t>(i + j * n)]));
      asym = std::max(asym, std::abs(hij - hji));
    }
  CHECK(diff <= 1e-12 * hmax);
  CHECK(asym <= 1e-12 * hmax);
  for (index_t j = 0; j < n; ++j) CHECK(H[static_cast<std::size_t>(n + j * ldh)] == 0.25);  // padding untouched
}

SvdRegularizer bound_svd(std::vector<index_t> shape, const Vec& ref, double tau, index_t begin = 0) {
  const index_t n = static_cast<index_t>(ref.size());
  SvdRegularizer reg("unfold", BinRange{begin, begin + n}, std::move(shape), tau);
  reg.bind(ref);
  return reg;
}

}  // namespace

TEST_CASE("SVD penalty: hand-computed 1-D values with symmetric edge padding", "[likelihood][regularizer]") {
  SECTION("a linear ratio costs only its two edge cells") {
    // r = (1, 2, 3, 4); padding gives r[-1] = 1, r[4] = 4, so Δr = (1, 0, 0, −1).
    const Vec ref{2, 4, 5, 10}, o{2, 8, 15, 40};
    const auto reg = bound_svd({4}, ref, 0.5);
    CHECK(reg.weight() == Approx(std::exp(1.0)).epsilon(1e-15));
    CHECK(value_of(reg, o) == Approx(2.0 * std::exp(1.0)).epsilon(1e-14));
    CHECK(value_of(reg, o) == Approx(svd_brute_force({4}, ref, o, 0.5)).epsilon(1e-14));
  }
  SECTION("a zero reference fixes that ratio at 1, whatever o is there") {
    // r = (1, 1, 3, 4) → Δr = (0, 2, −1, −1), penalty 6; gradient 2·D·L·Δr = 2·(1/2·2, 0, 1/5·3, 1/10·0).
    const Vec ref{2, 0, 5, 10};
    const auto reg = bound_svd({4}, ref, 0.0);
    for (double o1 : {7.0, -3.0, 1e6}) {
      const Vec o{2, o1, 15, 40};
      CHECK(value_of(reg, o) == Approx(6.0).epsilon(1e-14));
      const Vec g = gradient_of(reg, o);
      CHECK(g[0] == Approx(2.0).epsilon(1e-14));
      CHECK(g[1] == 0.0);
      CHECK(g[2] == Approx(1.2).epsilon(1e-14));
      CHECK(g[3] == Approx(0.0).margin(1e-14));
    }
  }
  SECTION("a single bin has no curvature") {
    const auto reg = bound_svd({1}, {3.0}, 1.0);
    CHECK(value_of(reg, {17.0}) == 0.0);
    CHECK(gradient_of(reg, {17.0})[0] == 0.0);
  }
}

TEST_CASE("SVD penalty: hand-computed 2-D and 3-D values", "[likelihood][regularizer]") {
  SECTION("2-D 5-point stencil") {
    // r = [[1, 2, 3], [1, 1, 1]]: Δr = [[1, −1, −3], [0, 1, 2]], Σ(Δr)² = 16.
    const Vec ref{1, 2, 1, 2, 1, 2}, r{1, 2, 3, 1, 1, 1};
    Vec o(6);
    for (std::size_t b = 0; b < 6; ++b) o[b] = r[b] * ref[b];
    const auto reg = bound_svd({2, 3}, ref, -0.25);
    CHECK(value_of(reg, o) == Approx(16.0 * std::exp(-0.5)).epsilon(1e-14));
    CHECK(value_of(reg, o) == Approx(svd_brute_force({2, 3}, ref, o, -0.25)).epsilon(1e-14));
  }
  SECTION("3-D 7-point stencil") {
    // A 2×2×2 cube of ones with r = 2 at the first corner: Δr = −3 there, +1 at its three
    // neighbours, 0 elsewhere, so Σ(Δr)² = 12.
    const Vec ref(8, 4.0);
    Vec o(8, 4.0);
    o[0] = 8.0;
    const auto reg = bound_svd({2, 2, 2}, ref, 0.0);
    CHECK(value_of(reg, o) == Approx(12.0).epsilon(1e-14));
  }
}

TEST_CASE("SVD penalty vanishes for yields proportional to the reference", "[likelihood][regularizer]") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> yield(5.0, 50.0);
  for (const std::vector<index_t>& shape : std::vector<std::vector<index_t>>{{6}, {3, 4}, {2, 3, 2}}) {
    index_t n = 1;
    for (index_t e : shape) n *= e;
    INFO("rank " << shape.size());
    Vec ref(static_cast<std::size_t>(n));
    for (double& x : ref) x = yield(rng);
    const auto reg = bound_svd(shape, ref, 0.7);
    for (double alpha : {1.0, 1.7, 0.2}) {
      Vec o(ref);
      for (double& x : o) x *= alpha;
      CHECK(value_of(reg, o) < 1e-26);
      for (double gi : gradient_of(reg, o)) CHECK(std::abs(gi) < 1e-12);
    }
    // Any non-constant ratio costs something.
    Vec o(ref);
    o[static_cast<std::size_t>(n / 2)] *= 1.1;
    CHECK(value_of(reg, o) > 1e-4);
  }
  SECTION("except where a zero reference pins the ratio at 1") {
    // r = (α, α, 1, α, α): Δr = (0, 1 − α, 2(α − 1), 1 − α, 0), penalty 6(α − 1)².
    const Vec ref{3, 4, 0, 6, 7};
    const auto reg = bound_svd({5}, ref, 0.0);
    for (double alpha : {1.0, 1.5, 0.25}) {
      Vec o(ref);
      for (double& x : o) x *= alpha;
      CHECK(value_of(reg, o) == Approx(6.0 * (alpha - 1) * (alpha - 1)).margin(1e-14));
    }
  }
}

TEST_CASE("SVD penalty matches the padded-grid reference and its derivatives match finite differences",
          "[likelihood][regularizer]") {
  const auto shape = GENERATE(std::vector<index_t>{9}, std::vector<index_t>{2}, std::vector<index_t>{3, 4},
                              std::vector<index_t>{4, 1}, std::vector<index_t>{2, 3, 4}, std::vector<index_t>{3, 1, 2});
  index_t n = 1;
  for (index_t e : shape) n *= e;
  INFO("shape rank " << shape.size() << ", " << n << " bins");
  std::mt19937_64 rng(static_cast<std::uint64_t>(n) * 31 + shape.size());
  std::uniform_real_distribution<double> yield(5.0, 50.0), ratio(0.6, 1.5);
  Vec ref(static_cast<std::size_t>(n)), o(ref.size());
  for (double& x : ref) x = yield(rng);
  const auto zero = static_cast<std::size_t>(n / 2);
  ref[zero] = 0.0;
  for (std::size_t b = 0; b < o.size(); ++b) o[b] = ref[b] * ratio(rng);
  o[zero] = 12.0;  // read nowhere: its ratio is pinned at 1
  const double tau = 0.3;
  const auto reg = bound_svd(shape, ref, tau, 17);

  std::unique_ptr<ObservablePenalty> base = std::make_unique<SvdRegularizer>(reg);
  STATIC_REQUIRE(!std::is_base_of_v<ParameterPenalty, SvdRegularizer>);
  CHECK(base->bins() == BinRange{17, 17 + n});
  CHECK(base->name() == "unfold");

  const double f = value_of(*base, o);
  CHECK(f > 0.0);
  CHECK(f == Approx(svd_brute_force(shape, ref, o, tau)).epsilon(1e-13));
  check_derivatives(*base, o, 0.5, rng);

  // The pinned bin drops out of every derivative.
  CHECK(gradient_of(reg, o)[zero] == 0.0);
  Vec H(static_cast<std::size_t>(n * n), 0.0);
  reg.add_hessian(o, BlockView<double>(H.data(), n, n));
  for (index_t i = 0; i < n; ++i) {
    CHECK(H[static_cast<std::size_t>(i) + zero * static_cast<std::size_t>(n)] == 0.0);
    CHECK(H[zero + static_cast<std::size_t>(i * n)] == 0.0);
  }
}

TEST_CASE("SVD regularizer rejects bad arguments, naming them", "[likelihood][regularizer]") {
  using Catch::Contains;
  auto make = [](BinRange bins, std::vector<index_t> shape, double tau) {
    return SvdRegularizer("unfold", bins, std::move(shape), tau);
  };
  REQUIRE_THROWS_AS(make({0, 4}, {}, 0.0), usage_error);
  REQUIRE_THROWS_WITH(make({0, 4}, {}, 0.0), Contains("SVD regularizer 'unfold'") && Contains("shape has 0 dimensions"));
  REQUIRE_THROWS_WITH(make({0, 16}, {2, 2, 2, 2}, 0.0), Contains("shape has 4 dimensions; use 1 to 3"));
  REQUIRE_THROWS_WITH(make({0, 4}, {4, 0}, 0.0), Contains("shape extent 1 is 0"));
  REQUIRE_THROWS_WITH(make({0, 4}, {-2, -2}, 0.0), Contains("shape extent 0 is -2"));
  REQUIRE_THROWS_WITH(make({0, 5}, {2, 3}, 0.0), Contains("shape holds 6 cells but bins has 5"));
  REQUIRE_THROWS_WITH(make({0, 5}, {1000000000000, 3}, 0.0), Contains("but bins has 5"));
  REQUIRE_THROWS_WITH(make({3, 3}, {1}, 0.0), Contains("bins [3, 3)"));
  REQUIRE_THROWS_WITH(make({-1, 3}, {4}, 0.0), Contains("bins [-1, 3)"));
  REQUIRE_THROWS_WITH(make({0, 4}, {4}, std::nan("")), Contains("tau"));
  REQUIRE_THROWS_WITH(make({0, 4}, {4}, 400.0), Contains("tau"));
  REQUIRE_NOTHROW(make({0, 4}, {4}, -3.0));

  SvdRegularizer reg("unfold", {10, 14}, {2, 2}, 0.0);
  const Vec o{1, 2, 3, 4};
  REQUIRE_THROWS_WITH(reg.value_grad(o, {}), Contains("'unfold'") && Contains("call bind()"));
  REQUIRE_THROWS_AS(reg.bind(Vec{1, 2, 3}), usage_error);
  REQUIRE_THROWS_WITH(reg.bind(Vec{1, 2, 3}), Contains("got 3 reference yields; it reads 4 bins"));
  REQUIRE_THROWS_AS(reg.bind(Vec{1, std::nan(""), 3, 4}), model_error);
  REQUIRE_THROWS_WITH(reg.bind(Vec{1, 2, INFINITY, 4}), Contains("global bin 12"));
  reg.bind(Vec{1, 2, 3, 4});
  REQUIRE_THROWS_WITH(reg.value_grad(Vec{1, 2, 3}, {}), Contains("3 entries; it expects 4"));
  Vec g(3);
  REQUIRE_THROWS_WITH(reg.value_grad(o, g), Contains("the gradient has 3 entries"));
  Vec v(8), hv(6);
  REQUIRE_THROWS_WITH(reg.hessp(o, ConstBlockView<double>(v.data(), 4, 2), BlockView<double>(hv.data(), 3, 2)),
                      Contains("Hessian-vector blocks"));
  Vec H(12);
  REQUIRE_THROWS_WITH(reg.add_hessian(o, BlockView<double>(H.data(), 4, 3)), Contains("must be [4 × 4]"));
}

TEST_CASE("smoothness prior: hand-computed values and derivatives", "[likelihood][regularizer]") {
  const std::vector<std::string> names{"mu", "a", "b", "c", "d"};
  const Vec x{0.3, 1.0, -0.5, 2.0, 0.25};

  SECTION("first differences follow the given order, not the parameter order") {
    // d = (a − c, b − a) = (−1, −1.5); penalty (1 + 2.25)/(2·0.25) = 6.5.
    SmoothnessPrior prior("smooth", {"c", "a", "b"}, 0.5);
    STATIC_REQUIRE(!std::is_base_of_v<ObservablePenalty, SmoothnessPrior>);
    prior.bind(names);
    CHECK(prior.indices() == std::vector<index_t>{3, 1, 2});
    Vec g(5, 0.0);
    CHECK(prior.value_grad(x, g) == Approx(6.5).epsilon(1e-15));
    const Vec g_hand{0.0, 2.0, -6.0, 4.0, 0.0};
    CHECK(rel_error(g, g_hand) < 1e-15);
    Vec H(25, 0.0);
    prior.add_hessian(x, BlockView<double>(H.data(), 5, 5));
    CHECK(H[1 + 1 * 5] == Approx(8.0));   // a sits in both differences
    CHECK(H[3 + 3 * 5] == Approx(4.0));
    CHECK(H[1 + 3 * 5] == Approx(-4.0));
    CHECK(H[3 + 2 * 5] == 0.0);           // c and b share no difference
    for (index_t i = 0; i < 5; ++i) CHECK(H[static_cast<std::size_t>(i)] == 0.0);  // mu is not in the prior
  }
  SECTION("second differences") {
    // d = (c − 2b + a, d − 2c + b) = (4, −4.25); penalty (16 + 18.0625)/(2·4).
    SmoothnessPrior prior("smooth", {"a", "b", "c", "d"}, 2.0, 2);
    prior.bind(names);
    Vec g(5, 0.0);
    CHECK(prior.value_grad(x, g) == Approx(34.0625 / 8.0).epsilon(1e-15));
    const Vec g_hand{0.0, 1.0, -3.0625, 3.125, -1.0625};
    CHECK(rel_error(g, g_hand) < 1e-15);
  }
  SECTION("order 1 ignores a common shift, order 2 a linear trend") {
    SmoothnessPrior first("flat", {"a", "b", "c", "d"}, 0.1, 1), second("line", {"a", "b", "c", "d"}, 0.1, 2);
    first.bind(names);
    second.bind(names);
    const Vec shift{5.0, 2.5, 2.5, 2.5, 2.5}, line{-1.0, 3.0, 3.5, 4.0, 4.5};
    CHECK(value_of(first, shift) == 0.0);
    CHECK(value_of(second, line) == 0.0);
    CHECK(value_of(first, line) > 1.0);
    for (double gi : gradient_of(second, line)) CHECK(gi == 0.0);
  }
}

TEST_CASE("smoothness prior derivatives match finite differences", "[likelihood][regularizer]") {
  const int order = GENERATE(1, 2);
  INFO("order " << order);
  const std::vector<std::string> names{"mu", "p0", "p1", "p2", "p3", "p4", "theta"};
  SmoothnessPrior prior("smooth", {"p2", "p0", "p4", "p1", "p3"}, 0.3, order);
  prior.bind(names);
  std::unique_ptr<ParameterPenalty> base = std::make_unique<SmoothnessPrior>(prior);
  std::mt19937_64 rng(5 + static_cast<std::uint64_t>(order));
  std::normal_distribution<double> normal;
  Vec x(names.size());
  for (double& xi : x) xi = normal(rng);
  CHECK(value_of(*base, x) > 0.0);
  check_derivatives(*base, x, 0.1, rng);
  const Vec g = gradient_of(*base, x);
  CHECK(g[0] == 0.0);
  CHECK(g[6] == 0.0);
}

TEST_CASE("smoothness prior rejects bad arguments and names, naming them", "[likelihood][regularizer]") {
  using Catch::Contains;
  REQUIRE_THROWS_AS(SmoothnessPrior("smooth", {"a", "b"}, 0.0), usage_error);
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b"}, 0.0), Contains("smoothness prior 'smooth'") && Contains("sigma"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b"}, -1.0), Contains("sigma"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b"}, std::nan("")), Contains("sigma"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b"}, 1e-200), Contains("sigma"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b", "c"}, 1.0, 3), Contains("order is 3"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b", "c"}, 1.0, 0), Contains("order is 0"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a"}, 1.0, 1), Contains("parameters has 1 names"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b"}, 1.0, 2), Contains("order 2 needs at least 3"));
  REQUIRE_THROWS_WITH(SmoothnessPrior("smooth", {"a", "b", "a"}, 1.0),
                      Contains("parameter 'a' appears twice in smoothness prior 'smooth'"));

  SmoothnessPrior prior("smooth", {"a", "zeta", "b"}, 1.0);
  REQUIRE_THROWS_WITH(prior.value_grad(Vec{1, 2, 3}, {}), Contains("call bind()"));
  REQUIRE_THROWS_AS(prior.bind({"a", "b", "c"}), usage_error);
  REQUIRE_THROWS_WITH(prior.bind({"a", "b", "c"}), Contains("unknown parameter 'zeta' in smoothness prior 'smooth'"));
  prior.bind({"b", "zeta", "a", "c"});
  CHECK(prior.indices() == std::vector<index_t>{2, 1, 0});
  REQUIRE_THROWS_WITH(prior.value_grad(Vec{1, 2, 3}, {}), Contains("3 entries; it expects 4"));
}
