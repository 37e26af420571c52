// Mamba's diagonal selective scan on the CPU, forward and backward, as XLA FFI custom calls (memlab.layers.native
// builds this file with the machine's C++ compiler and registers it with JAX). The same recursion as
// memlab.layers.s6.selective_scan's sequential form, and tested equal to it to float rounding:
//
//     h_t = exp(delta_t a) h_{t-1} + bscale_t (x_t B_t),   y_t = h_t C_t      (per channel d: a, h (N,))
//     bscale_t = expm1(delta_t a) / a  ("zoh", a != 0)   or   delta_t  ("euler_b")
//
// Why a kernel: under XLA each time step of the scan is a handful of separate loops over the (batch, d_inner,
// d_state) state, each reading and writing it through memory, and the backward step about twenty; here one pass per
// step goes over one sequence's (d_state, d_inner) state, which the cache holds, vectorised over the channels, and
// the backward recomputes the states of one sequence at a time, a chunk of steps at a time, instead of storing the
// whole batch's (benchmarks/bench_arena.py).
//
// Layout: every operand has the same leading batch dimensions (JAX's vmap_method="broadcast_all"), then
// x, delta (L, D); A (D, N); B, C (L, N); h0 (D, N); reset (L,) bool: step t starts from h0 where reset[t] (and
// step 0 always does).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// exp(x) and expm1(x) from one range reduction: x = k ln2 + r, |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts),
// expm1(r) = r + r^2 Q(r), then exp(x) = 2^k (1 + expm1(r)) and expm1(x) = (2^k - 1) + 2^k expm1(r), exact in
// form for k = 0 where expm1 matters. Q: Cephes' minimax polynomial for float (expf.c, relative error 4.2e-9 on
// |r| <= 0.5), the Taylor series to r^13 / 13! for double (truncation below 1e-17). Below exp's smallest normal
// result the input is clamped (about 1e-38 for float, where XLA's gives 0 or a subnormal), above overflow +inf. Plain
// arithmetic and integer bit moves only, so the loops over d_state that call it vectorise.
template <typename T>
struct ExpTraits;

template <>
struct ExpTraits<float> {
  using Bits = int32_t;
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f;  // few mantissa bits: k * kLn2Hi is exact
  static constexpr float kLn2Lo = -2.12194440e-4f;
  static constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  static constexpr float kLow = -87.33654475f;   // exp(kLow) is the smallest normal float
  static constexpr float kHigh = 88.72283905f;   // above: exp overflows
  static constexpr int kMantissa = 23, kBias = 127, kDegree = 5;
  static constexpr float kQ[kDegree + 1] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
};

template <>
struct ExpTraits<double> {
  using Bits = int64_t;
  static constexpr double kLog2e = 1.4426950408889634074;
  static constexpr double kLn2Hi = 6.93147180369123816490e-01;
  static constexpr double kLn2Lo = 1.90821492927058770002e-10;
  static constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  static constexpr double kLow = -708.39641853226408;
  static constexpr double kHigh = 709.78271289338397;
  static constexpr int kMantissa = 52, kBias = 1023, kDegree = 11;
  static constexpr double kQ[kDegree + 1] = {  // 1 / 13!, 1 / 12!, ..., 1 / 2!
      1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
      1.0 / 5040.0,       1.0 / 720.0,       1.0 / 120.0,      1.0 / 24.0,      1.0 / 6.0,      1.0 / 2.0};
};

template <typename T>
inline void exp_expm1(T x, T& e, T& em1) {
  using Tr = ExpTraits<T>;
  using Bits = typename Tr::Bits;
  const T xc = x < Tr::kLow ? Tr::kLow : (x > Tr::kHigh ? Tr::kHigh : x);
  const T shifted = xc * Tr::kLog2e + Tr::kShifter;
  const T k = shifted - Tr::kShifter;
  // just below overflow k = bias + 1 and 2^k overflows while exp(x) does not: there take 2^(k-1), double the result
  const bool top = k > T(Tr::kBias);
  const T shifted_scale = shifted - (top ? T(1) : T(0));  // exact: an integer in the low bits
  Bits k_bits, shifter_bits;
  std::memcpy(&k_bits, &shifted_scale, sizeof(T));
  const T shifter = Tr::kShifter;
  std::memcpy(&shifter_bits, &shifter, sizeof(T));
  const Bits scale_bits = (k_bits - shifter_bits + Tr::kBias) << Tr::kMantissa;
  T scale;
  std::memcpy(&scale, &scale_bits, sizeof(T));
  const T r = (xc - k * Tr::kLn2Hi) - k * Tr::kLn2Lo;
  T q = Tr::kQ[0];
  for (int j = 1; j <= Tr::kDegree; ++j) q = q * r + Tr::kQ[j];
  const T p = q * (r * r) + r;  // expm1(r)
  const bool over = x > Tr::kHigh;
  const T inf = std::numeric_limits<T>::infinity();
  const T base = scale + scale * p;
  e = over ? inf : (top ? T(2) * base : base);
  em1 = over ? inf : (top ? T(2) * base : (scale - T(1)) + scale * p);  // exp(x) > 2^127: the 1 is below an ulp
}

// The discretisation of one (channel, state) entry: abar = exp(delta a) and the input scale bscale (inv_a = 1 / a,
// computed once per sequence: a product in the loop rather than a division).
template <typename T, bool kEulerB>
inline void discretise(T delta, T a, T inv_a, T& abar, T& bscale) {
  T em1;
  exp_expm1(delta * a, abar, em1);
  bscale = kEulerB ? delta : em1 * inv_a;
}

struct Dims {
  int64_t batch, L, D, N;
};

template <ffi::DataType dtype>
Dims dims_of(const ffi::Buffer<dtype>& x, const ffi::Buffer<dtype>& A) {
  auto xd = x.dimensions();
  auto ad = A.dimensions();
  const int64_t L = xd[xd.size() - 2], D = xd[xd.size() - 1], N = ad[ad.size() - 1];
  return {static_cast<int64_t>(x.element_count()) / (L * D), L, D, N};
}

// out (cols, rows) = in (rows, cols) transposed.
template <typename T>
void transpose(int64_t rows, int64_t cols, const T* in, T* out) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = in[i * cols + j];
}

// One sequence's operands that are (D, N) in JAX, held here as (N, D): the loops run over the channels d, which
// are contiguous in x_t and delta_t, so they vectorise with no sum across a vector (y_t's sum over n is a sum of
// vectors) and no per-channel overhead.
template <typename T>
struct Transposed {
  std::vector<T> A, inv_A, h0;
  Transposed(const Dims& s) : A(s.D * s.N), inv_A(s.D * s.N), h0(s.D * s.N) {}
  void load(const Dims& s, const T* A_dn, const T* h0_dn) {
    transpose(s.D, s.N, A_dn, A.data());
    transpose(s.D, s.N, h0_dn, h0.data());
    for (size_t i = 0; i < A.size(); ++i) inv_A[i] = T(1) / A[i];
  }
};

// Steps [t0, t1) of one sequence forward from the state h (N, D), which they advance, writing y_t (D,) for each.
// With kKeep, also what the backward pass reads: the state each step starts from and each step's abar and bscale,
// kept[0..2], (t1 - t0, N, D) each.
template <typename T, bool kEulerB, bool kKeep>
void forward_steps(const Dims& s, const Transposed<T>& op, int64_t t0, int64_t t1, const T* x, const T* delta,
                   const T* B, const T* C, const bool* reset, T* y, T* h, T* const* kept) {
  const int64_t D = s.D, N = s.N;
  for (int64_t t = t0; t < t1; ++t) {
    if (reset[t]) std::memcpy(h, op.h0.data(), sizeof(T) * D * N);
    const int64_t k = t - t0;
    if (kKeep) std::memcpy(kept[0] + k * D * N, h, sizeof(T) * D * N);
    const T* x_t = x + t * D;
    const T* delta_t = delta + t * D;
    T* y_t = y + t * D;
    std::fill(y_t, y_t + D, T(0));
    for (int64_t n = 0; n < N; ++n) {
      const T B_tn = B[t * N + n], C_tn = C[t * N + n];
      const T* a = op.A.data() + n * D;
      const T* inv_a = op.inv_A.data() + n * D;
      T* h_n = h + n * D;
      T* abar_n = kKeep ? kept[1] + (k * N + n) * D : nullptr;
      T* bscale_n = kKeep ? kept[2] + (k * N + n) * D : nullptr;
#pragma GCC ivdep
      for (int64_t d = 0; d < D; ++d) {
        T abar, bscale;
        discretise<T, kEulerB>(delta_t[d], a[d], inv_a[d], abar, bscale);
        h_n[d] = abar * h_n[d] + bscale * (x_t[d] * B_tn);
        y_t[d] += h_n[d] * C_tn;
        if (kKeep) {
          abar_n[d] = abar;
          bscale_n[d] = bscale;
        }
      }
    }
  }
}

template <ffi::DataType dtype, bool kEulerB>
ffi::Error forward(ffi::Buffer<dtype> x, ffi::Buffer<dtype> delta, ffi::Buffer<dtype> A, ffi::Buffer<dtype> B,
                   ffi::Buffer<dtype> C, ffi::Buffer<dtype> h0, ffi::Buffer<ffi::PRED> reset,
                   ffi::ResultBuffer<dtype> y, ffi::ResultBuffer<dtype> h_last) {
  using T = ffi::NativeType<dtype>;
  const Dims s = dims_of(x, A);
  const int64_t LD = s.L * s.D, DN = s.D * s.N, LN = s.L * s.N;
  Transposed<T> op(s);
  std::vector<T> h(DN);
  for (int64_t b = 0; b < s.batch; ++b) {
    op.load(s, A.typed_data() + b * DN, h0.typed_data() + b * DN);
    h = op.h0;
    forward_steps<T, kEulerB, false>(s, op, 0, s.L, x.typed_data() + b * LD, delta.typed_data() + b * LD,
                                     B.typed_data() + b * LN, C.typed_data() + b * LN, reset.typed_data() + b * s.L,
                                     y->typed_data() + b * LD, h.data(), nullptr);
    transpose(s.N, s.D, h.data(), h_last->typed_data() + b * DN);
  }
  return ffi::Error::Success();
}

// Step t of the backward pass for state entry n, over the channels d, from what forward_steps kept; g_n enters as
// the part of dLoss/dh_t from later steps and leaves as dLoss/dh_{t-1}'s (zero where step t starts from h0:
// kFromH0, the gradient then going to gh0_n).
template <typename T, bool kEulerB, bool kFromH0>
inline void backward_step(int64_t D, const T* a, const T* inv_a, const T* x_t, const T* delta_t, const T* gy_t,
                          const T* h_prev, const T* abar_n, const T* bscale_n, T B_tn, T C_tn, T* g_n, T* gx_t,
                          T* gdelta_t, T* gA_n, T* gh0_n, T& gB_tn, T& gC_tn) {
  T gB = 0, gC = 0;
#pragma GCC ivdep
  for (int64_t d = 0; d < D; ++d) {
    const T abar = abar_n[d], bscale = bscale_n[d];
    const T xB = x_t[d] * B_tn;
    const T G = g_n[d] + gy_t[d] * C_tn;
    gC += gy_t[d] * (abar * h_prev[d] + bscale * xB);  // dC_t = h_t^T gy_t
    const T g_abar = G * h_prev[d], g_bscale = G * xB;
    if (kEulerB) {  // abar = exp(delta a), bscale = delta
      gdelta_t[d] += g_abar * a[d] * abar + g_bscale;
      gA_n[d] += g_abar * delta_t[d] * abar;
    } else {  // bscale = expm1(delta a) / a: d/ddelta = abar, d/da = (delta abar - bscale) / a
      gdelta_t[d] += (g_abar * a[d] + g_bscale) * abar;
      gA_n[d] += g_abar * delta_t[d] * abar + g_bscale * (delta_t[d] * abar - bscale) * inv_a[d];
    }
    const T g_xB = G * bscale;
    gx_t[d] += g_xB * B_tn;
    gB += g_xB * x_t[d];
    if (kFromH0) {
      gh0_n[d] += abar * G;
      g_n[d] = T(0);
    } else {
      g_n[d] = abar * G;
    }
  }
  gB_tn = gB;
  gC_tn = gC;
}

// Steps t1 - 1 down to t0 of one sequence's backward pass, from forward_steps' kept arrays for [t0, t1); g (N, D)
// is dLoss/dh_{t1-1}'s part from later steps on entry, dLoss/dh_{t0-1}'s on exit; gA and gh0 (N, D) accumulate.
// With G_t = dLoss/dh_t: G_t = gy_t C_t + abar_{t+1} G_{t+1} (the second term only if step t+1 continues from
// h_t); memlab.layers.s6's _sequential_scan_backward states each term.
template <typename T, bool kEulerB>
void backward_steps(const Dims& s, const Transposed<T>& op, int64_t t0, int64_t t1, const T* x, const T* delta,
                    const T* B, const T* C, const bool* reset, T* const* kept, const T* gy, T* g, T* gx, T* gdelta,
                    T* gA, T* gB, T* gC, T* gh0) {
  const int64_t D = s.D, N = s.N;
  for (int64_t t = t1 - 1; t >= t0; --t) {
    const bool from_h0 = reset[t] || t == 0;
    T* gx_t = gx + t * D;
    T* gdelta_t = gdelta + t * D;
    std::fill(gx_t, gx_t + D, T(0));
    std::fill(gdelta_t, gdelta_t + D, T(0));
    for (int64_t n = 0; n < N; ++n) {
      const T *a = op.A.data() + n * D, *inv_a = op.inv_A.data() + n * D;
      const int64_t kn = ((t - t0) * N + n) * D;
      auto step = [&](auto restarts) {  // restarts: std::true_type or std::false_type, a compile-time flag
        backward_step<T, kEulerB, decltype(restarts)::value>(
            D, a, inv_a, x + t * D, delta + t * D, gy + t * D, kept[0] + kn, kept[1] + kn, kept[2] + kn,
            B[t * N + n], C[t * N + n], g + n * D, gx_t, gdelta_t, gA + n * D, gh0 + n * D, gB[t * N + n],
            gC[t * N + n]);
      };
      if (from_h0) {
        step(std::true_type{});
      } else {
        step(std::false_type{});
      }
    }
  }
}

// How many steps the backward pass takes at a time: as many as keep their three (N, D) arrays per step within
// about 1 MiB, which the cache holds while they are read back. A longer sequence is done in chunks, each
// recomputed from its first state, which a forward pass over the whole sequence stores first.
constexpr int64_t kKeptBytes = int64_t(1) << 20;

template <ffi::DataType dtype, bool kEulerB>
ffi::Error backward(ffi::Buffer<dtype> x, ffi::Buffer<dtype> delta, ffi::Buffer<dtype> A, ffi::Buffer<dtype> B,
                    ffi::Buffer<dtype> C, ffi::Buffer<dtype> h0, ffi::Buffer<ffi::PRED> reset,
                    ffi::Buffer<dtype> gy, ffi::Buffer<dtype> g_last, ffi::ResultBuffer<dtype> gx,
                    ffi::ResultBuffer<dtype> gdelta, ffi::ResultBuffer<dtype> gA, ffi::ResultBuffer<dtype> gB,
                    ffi::ResultBuffer<dtype> gC, ffi::ResultBuffer<dtype> gh0) {
  using T = ffi::NativeType<dtype>;
  const Dims s = dims_of(x, A);
  const int64_t LD = s.L * s.D, DN = s.D * s.N, LN = s.L * s.N;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(s.L, kKeptBytes / (3 * DN * int64_t(sizeof(T)))));
  const int64_t chunks = (s.L + chunk - 1) / chunk;
  Transposed<T> op(s);
  std::vector<T> firsts(chunks * DN), states(chunk * DN), abars(chunk * DN), bscales(chunk * DN), y(LD), h(DN),
      g(DN), gA_nd(DN), gh0_nd(DN);
  T* const kept[3] = {states.data(), abars.data(), bscales.data()};
  for (int64_t b = 0; b < s.batch; ++b) {
    const T* xb = x.typed_data() + b * LD;
    const T* deltab = delta.typed_data() + b * LD;
    const T* Bb = B.typed_data() + b * LN;
    const T* Cb = C.typed_data() + b * LN;
    const bool* resetb = reset.typed_data() + b * s.L;
    op.load(s, A.typed_data() + b * DN, h0.typed_data() + b * DN);
    h = op.h0;
    for (int64_t c = 0; c < chunks; ++c) {  // each chunk's first state (none but h0 to compute for one chunk)
      std::copy(h.begin(), h.end(), firsts.begin() + c * DN);
      if (c + 1 < chunks)
        forward_steps<T, kEulerB, false>(s, op, c * chunk, (c + 1) * chunk, xb, deltab, Bb, Cb, resetb, y.data(),
                                         h.data(), nullptr);
    }
    transpose(s.D, s.N, g_last.typed_data() + b * DN, g.data());
    std::fill(gA_nd.begin(), gA_nd.end(), T(0));
    std::fill(gh0_nd.begin(), gh0_nd.end(), T(0));
    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t t0 = c * chunk, t1 = std::min(s.L, t0 + chunk);
      std::copy(firsts.begin() + c * DN, firsts.begin() + (c + 1) * DN, h.begin());
      forward_steps<T, kEulerB, true>(s, op, t0, t1, xb, deltab, Bb, Cb, resetb, y.data(), h.data(), kept);
      backward_steps<T, kEulerB>(s, op, t0, t1, xb, deltab, Bb, Cb, resetb, kept, gy.typed_data() + b * LD,
                                 g.data(), gx->typed_data() + b * LD, gdelta->typed_data() + b * LD, gA_nd.data(),
                                 gB->typed_data() + b * LN, gC->typed_data() + b * LN, gh0_nd.data());
    }
    transpose(s.N, s.D, gA_nd.data(), gA->typed_data() + b * DN);
    transpose(s.N, s.D, gh0_nd.data(), gh0->typed_data() + b * DN);
  }
  return ffi::Error::Success();
}

}  // namespace

// The operands both passes take: x, delta, A, B, C, h0 and reset.
template <ffi::DataType dtype>
auto bind_operands() {
  using Buf = ffi::Buffer<dtype>;
  return ffi::Ffi::Bind()
      .template Arg<Buf>()
      .template Arg<Buf>()
      .template Arg<Buf>()
      .template Arg<Buf>()
      .template Arg<Buf>()
      .template Arg<Buf>()
      .template Arg<ffi::Buffer<ffi::PRED>>();
}

// forward: -> y, h_last. backward: (operands, gy, g_last) -> gx, gdelta, gA, gB, gC, gh0.
#define MEMLAB_SCAN_HANDLERS(NAME, DTYPE, EULER_B)                                                                 \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(                                                                                  \
      NAME##_forward, (forward<DTYPE, EULER_B>),                                                                  \
      bind_operands<DTYPE>().Ret<ffi::Buffer<DTYPE>>().Ret<ffi::Buffer<DTYPE>>());                                \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(NAME##_backward, (backward<DTYPE, EULER_B>),                                      \
                                bind_operands<DTYPE>()                                                            \
                                    .Arg<ffi::Buffer<DTYPE>>()                                                    \
                                    .Arg<ffi::Buffer<DTYPE>>()                                                    \
                                    .Ret<ffi::Buffer<DTYPE>>()                                                    \
                                    .Ret<ffi::Buffer<DTYPE>>()                                                    \
                                    .Ret<ffi::Buffer<DTYPE>>()                                                    \
                                    .Ret<ffi::Buffer<DTYPE>>()                                                    \
                                    .Ret<ffi::Buffer<DTYPE>>()                                                    \
                                    .Ret<ffi::Buffer<DTYPE>>());

MEMLAB_SCAN_HANDLERS(selective_scan_zoh_f32, ffi::F32, false)
MEMLAB_SCAN_HANDLERS(selective_scan_zoh_f64, ffi::F64, false)
MEMLAB_SCAN_HANDLERS(selective_scan_euler_b_f32, ffi::F32, true)
MEMLAB_SCAN_HANDLERS(selective_scan_euler_b_f64, ffi::F64, true)
