// Local SGD of softmax regression, every step of a client in one call: the XLA FFI
// handlers behind fedjax_bench/core/kernels/logreg_sgd.py (which documents the math).
//
// Arguments, with any number of leading client dimensions (n clients in all):
//   kernel f32[..., O, D], bias f32[..., O], x [..., S, B, D] (u8 pixels or f32),
//   y s32[..., S, B], w f32[..., S, B] (example weights), steps s32[...], lr f32[...]
// Results: kernel and bias after min(steps, S) steps, and the sum of the steps' losses.
// Attribute use_bias: 0 keeps the bias as it is (a model without one).
//
// A step, for the B examples x_b (u8 pixels as x / 255) with labels y_b, weights w_b:
//   z_bo = x_b . W_o + b_o,  p_b = softmax(z_b),  W_S = max(sum_b w_b, 1e-12)
//   loss = sum_b w_b (logsumexp(z_b) - z_{b,y_b}) / W_S
//   g_bo = w_b (p_bo - [o == y_b]) / W_S,  W_o -= lr sum_b g_bo x_b,  b_o -= lr sum_b g_bo
// the gradient of Task.loss for this model, as JAX differentiates it; only the order of
// the float additions differs.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

typedef float v8 __attribute__((vector_size(32)));  // AVX registers (two SSE ones without)

constexpr int kClassBlock = 2, kExampleBlock = 5;  // a register tile: classes x examples

inline float hsum(v8 v) {
  float s = 0.f;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

// pixels_to_float's v / 255 without a division: the product by 1/255 corrected once by
// its exact residual (an FMA) is the correctly rounded quotient for every v in [0, 255]
// (checked for all 256), and vectorizes into three multiply-adds instead of a divide.
inline float to_float(uint8_t v) {
  const float x = float(v), inv = 1.0f / 255.0f, q = x * inv;
  return std::fma(std::fma(-q, 255.0f, x), inv, q);
}
inline float to_float(float v) { return v; }

// z[j][i] = x_{e0+j} . W_{o0+i} + b[i] for a tile of NO classes and NE examples: NO x NE
// accumulators stay in registers over the features.
template <int NO, int NE>
inline void ForwardTile(const v8* x, const v8* W, int64_t NV, const float* b, float* z,
                        int64_t O) {
  v8 acc[NO][NE] = {};
  for (int64_t k = 0; k < NV; ++k) {
    v8 wv[NO];
    for (int i = 0; i < NO; ++i) wv[i] = W[i * NV + k];
    for (int j = 0; j < NE; ++j) {
      const v8 xv = x[j * NV + k];
      for (int i = 0; i < NO; ++i) acc[i][j] += xv * wv[i];
    }
  }
  for (int i = 0; i < NO; ++i)
    for (int j = 0; j < NE; ++j) z[j * O + i] = hsum(acc[i][j]) + b[i];
}

// W_{o0+i} -= sum_j g[j][i] x_{e0+j} for a tile (g already scaled by the step size): the
// tile's NO x NE gradients stay in registers over the features.
template <int NO, int NE>
inline void UpdateTile(const v8* x, v8* W, int64_t NV, const float* g, int64_t O) {
  v8 gv[NE][NO];
  for (int j = 0; j < NE; ++j)
    for (int i = 0; i < NO; ++i) gv[j][i] = v8{} + g[j * O + i];
  for (int64_t k = 0; k < NV; ++k) {
    v8 acc[NO];
    for (int i = 0; i < NO; ++i) acc[i] = W[i * NV + k];
    for (int j = 0; j < NE; ++j) {
      const v8 xv = x[j * NV + k];
      for (int i = 0; i < NO; ++i) acc[i] -= gv[j][i] * xv;
    }
    for (int i = 0; i < NO; ++i) W[i * NV + k] = acc[i];
  }
}

template <int N>
using Int = std::integral_constant<int, N>;

// Calls f(Int<no>, Int<ne>) for a tile's sizes, no <= kClassBlock, ne <= kExampleBlock.
template <typename F>
inline void Tiled(int64_t no, int64_t ne, F&& f) {
  auto by_ne = [&](auto no_c) {
    switch (ne) {
      case 1: return f(no_c, Int<1>{});
      case 2: return f(no_c, Int<2>{});
      case 3: return f(no_c, Int<3>{});
      case 4: return f(no_c, Int<4>{});
      default: return f(no_c, Int<5>{});
    }
  };
  if (no == 1) by_ne(Int<1>{}); else by_ne(Int<2>{});
}

template <typename T, ffi::DataType DT>
ffi::Error Train(ffi::Buffer<ffi::F32> kernel, ffi::Buffer<ffi::F32> bias,
                 ffi::Buffer<DT> x, ffi::Buffer<ffi::S32> y, ffi::Buffer<ffi::F32> w,
                 ffi::Buffer<ffi::S32> steps, ffi::Buffer<ffi::F32> lr, int32_t use_bias,
                 ffi::ResultBuffer<ffi::F32> kernel_out, ffi::ResultBuffer<ffi::F32> bias_out,
                 ffi::ResultBuffer<ffi::F32> loss_out) {
  const auto xd = x.dimensions();
  const auto kd = kernel.dimensions();
  if (xd.size() < 3 || kd.size() < 2) {
    return ffi::Error::InvalidArgument("logreg_sgd: x needs [..., S, B, D], kernel [..., O, D]");
  }
  const int64_t S = xd[xd.size() - 3], B = xd[xd.size() - 2], D = xd[xd.size() - 1];
  const int64_t O = kd[kd.size() - 2];
  const int64_t n = steps.element_count();
  if (kd[kd.size() - 1] != D || kernel.element_count() != n * O * D ||
      bias.element_count() != n * O || x.element_count() != n * S * B * D ||
      y.element_count() != n * S * B || w.element_count() != n * S * B ||
      lr.element_count() != n) {
    return ffi::Error::InvalidArgument("logreg_sgd: inconsistent shapes");
  }
  const int64_t NV = (D + 7) / 8, DP = NV * 8;  // features padded to whole vectors
  std::vector<v8> xf(B * NV), W(O * NV);
  std::vector<float> z(B * O), g(B * O), b(O);
  float* xs_f = reinterpret_cast<float*>(xf.data());
  float* W_f = reinterpret_cast<float*>(W.data());

  for (int64_t c = 0; c < n; ++c) {
    for (int64_t o = 0; o < O; ++o) {
      std::memcpy(W_f + o * DP, kernel.typed_data() + (c * O + o) * D, D * sizeof(float));
      for (int64_t d = D; d < DP; ++d) W_f[o * DP + d] = 0.f;
      b[o] = bias.typed_data()[c * O + o];
    }
    const float eta = lr.typed_data()[c];
    const int64_t num_steps = std::min<int64_t>(std::max(steps.typed_data()[c], 0), S);
    float loss_sum = 0.f;
    for (int64_t s = 0; s < num_steps; ++s) {
      const int64_t at = c * S + s;
      const T* xb = x.typed_data() + at * B * D;
      const int32_t* yb = y.typed_data() + at * B;
      const float* wb = w.typed_data() + at * B;
      for (int64_t e = 0; e < B; ++e) {
        for (int64_t d = 0; d < D; ++d) xs_f[e * DP + d] = to_float(xb[e * D + d]);
        for (int64_t d = D; d < DP; ++d) xs_f[e * DP + d] = 0.f;
      }
      // z = x W^T + b, in tiles of kClassBlock classes x kExampleBlock examples.
      for (int64_t o0 = 0; o0 < O; o0 += kClassBlock)
        for (int64_t e0 = 0; e0 < B; e0 += kExampleBlock)
          Tiled(std::min<int64_t>(kClassBlock, O - o0), std::min<int64_t>(kExampleBlock, B - e0),
                [&](auto no, auto ne) {
                  ForwardTile<no, ne>(xf.data() + e0 * NV, W.data() + o0 * NV, NV, &b[o0],
                                      &z[e0 * O + o0], O);
                });
      float weight_sum = 0.f;
      for (int64_t e = 0; e < B; ++e) weight_sum += wb[e];
      const float denom = std::max(weight_sum, 1e-12f);
      float loss = 0.f;
      for (int64_t e = 0; e < B; ++e) {
        const float* ze = &z[e * O];
        const int64_t label = std::min<int64_t>(std::max(yb[e], 0), O - 1);
        float m = ze[0];
        for (int64_t o = 1; o < O; ++o) m = ze[o] > m ? ze[o] : m;
        if (!std::isfinite(m)) m = 0.f;  // as jax.nn.logsumexp: no inf - inf
        float sum = 0.f;
        for (int64_t o = 0; o < O; ++o) sum += std::exp(ze[o] - m);
        const float lse = m + std::log(sum);
        loss += wb[e] * (lse - ze[label]);
        for (int64_t o = 0; o < O; ++o) {
          g[e * O + o] = wb[e] * (std::exp(ze[o] - lse) - (o == label ? 1.f : 0.f)) / denom;
        }
      }
      loss_sum += loss / denom;
      if (use_bias) {
        for (int64_t o = 0; o < O; ++o) {
          float gb = 0.f;
          for (int64_t e = 0; e < B; ++e) gb += g[e * O + o];
          b[o] -= eta * gb;
        }
      }
      // W_o -= lr sum_e g_eo x_e, in the same tiles.
      for (int64_t e = 0; e < B * O; ++e) g[e] *= eta;
      for (int64_t o0 = 0; o0 < O; o0 += kClassBlock)
        for (int64_t e0 = 0; e0 < B; e0 += kExampleBlock)
          Tiled(std::min<int64_t>(kClassBlock, O - o0), std::min<int64_t>(kExampleBlock, B - e0),
                [&](auto no, auto ne) {
                  UpdateTile<no, ne>(xf.data() + e0 * NV, W.data() + o0 * NV, NV,
                                     &g[e0 * O + o0], O);
                });
    }
    for (int64_t o = 0; o < O; ++o) {
      std::memcpy(kernel_out->typed_data() + (c * O + o) * D, W_f + o * DP, D * sizeof(float));
      bias_out->typed_data()[c * O + o] = b[o];
    }
    loss_out->typed_data()[c] = loss_sum;
  }
  return ffi::Error::Success();
}

}  // namespace

#define LOGREG_SGD_BINDING(DT)                                                          \
  ffi::Ffi::Bind()                                                                      \
      .Arg<ffi::Buffer<ffi::F32>>()  /* kernel */                                        \
      .Arg<ffi::Buffer<ffi::F32>>()  /* bias */                                          \
      .Arg<ffi::Buffer<DT>>()        /* x */                                             \
      .Arg<ffi::Buffer<ffi::S32>>()  /* y */                                             \
      .Arg<ffi::Buffer<ffi::F32>>()  /* w */                                             \
      .Arg<ffi::Buffer<ffi::S32>>()  /* steps */                                         \
      .Arg<ffi::Buffer<ffi::F32>>()  /* lr */                                            \
      .Attr<int32_t>("use_bias")                                                        \
      .Ret<ffi::Buffer<ffi::F32>>()                                                     \
      .Ret<ffi::Buffer<ffi::F32>>()                                                     \
      .Ret<ffi::Buffer<ffi::F32>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(LogregSgdU8, (Train<uint8_t, ffi::U8>), LOGREG_SGD_BINDING(ffi::U8));
XLA_FFI_DEFINE_HANDLER_SYMBOL(LogregSgdF32, (Train<float, ffi::F32>), LOGREG_SGD_BINDING(ffi::F32));
