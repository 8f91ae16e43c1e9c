// The four tile transforms of Winograd's minimal filtering F(m x m, r x r) for an NHWC
// convolution: the XLA FFI handlers behind fedjax_bench/models/winograd.py (which documents
// the math and the layouts). The products between them are XLA's batched dots.
//
// Tiles: an output of Ho x Wo is covered by th x tw tiles of m x m; tile (n, i, j) reads the
// a x a input window whose corner is (i m - pad_h, j m - pad_w), a = m + r - 1, zeros outside
// the image. T = N th tw tiles, in (n, i, j) order. Every array has any number of leading
// dimensions (clients), looped over.
//
//   WinogradInput      x [..., N, H, W, C]  -> V [..., a*a, T, C]   V_pq = (B^T d B)_pq
//   WinogradInputT     V [..., a*a, T, C]   -> x [..., N, H, W, C]  its adjoint (summed over
//                                                                   overlapping windows)
//   WinogradOutput     M [..., a*a, T, C]   -> y [..., N, Ho, Wo, C] y_uv = (A^T M A)_uv
//   WinogradOutputT    y [..., N, Ho, Wo, C] -> M [..., a*a, T, C]  its adjoint
//
// Attributes: bt (B^T, a x a, row-major) or at (A^T, m x a), which must be the kernel's
// constants, pad_h, pad_w, th, tw, m; the image sizes are read from the buffers. Each map
// is linear; the sums run in a fixed order, so a call gives the same bits every time.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

struct Geometry {
  int64_t lead, n, h, w, c, th, tw, pad_h, pad_w;
  int64_t tiles() const { return n * th * tw; }
  int64_t image() const { return n * h * w * c; }                      // one client's images
  int64_t positions(int64_t a) const { return a * a * tiles() * c; }   // one client's [a*a, T, C]
};

typedef float v16 __attribute__((vector_size(64)));  // one AVX-512 register, two AVX ones
constexpr int64_t kLanes = 16;

// A block of up to 16 channels at p (n of them), zeros beyond.
inline v16 Load(const float* p, int64_t n) {
  v16 v = {};
  std::memcpy(&v, p, n * sizeof(float));
  return v;
}
inline void Store(float* p, v16 v, int64_t n) { std::memcpy(p, &v, n * sizeof(float)); }

// The transforms of models/winograd.py's `transforms` (its interpolation points), exact in
// float32, as compile-time constants so that the compiler drops the zero terms and folds the
// unit ones; a call checks that the matrices it is given are these.
template <int A> struct B;  // B^T, A x A
template <> struct B<4> {
  static constexpr float t[4][4] = {{-1, 0, 1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, -1, 0, 1}};
};
template <> struct B<6> {
  static constexpr float t[6][6] = {{1, -1.5f, -2, 1.5f, 1, 0},  {0, -1, 0.5f, 2.5f, 1, 0},
                                    {0, 1, -2.5f, 0.5f, 1, 0},   {0, -2, -1, 2, 1, 0},
                                    {0, 0.5f, -1, -0.5f, 1, 0},  {0, 1, -1.5f, -2, 1.5f, 1}};
};
template <> struct B<8> {
  static constexpr float t[8][8] = {
      {-1, 0, 5.25f, 0, -5.25f, 0, 1, 0},     {0, 1, 1, -4.25f, -4.25f, 1, 1, 0},
      {0, -1, 1, 4.25f, -4.25f, -1, 1, 0},    {0, 0.5f, 0.25f, -2.5f, -1.25f, 2, 1, 0},
      {0, -0.5f, 0.25f, 2.5f, -1.25f, -2, 1, 0}, {0, 2, 4, -2.5f, -5, 0.5f, 1, 0},
      {0, -2, 4, 2.5f, -5, -0.5f, 1, 0},      {0, -1, 0, 5.25f, 0, -5.25f, 0, 1}};
};
template <int A, int M> struct At;  // A^T, M x A
template <> struct At<4, 2> {
  static constexpr float t[2][4] = {{1, 1, 1, 0}, {0, 1, -1, 1}};
};
template <> struct At<6, 2> {
  static constexpr float t[2][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 0.5f, -2, 1}};
};
template <> struct At<6, 4> {
  static constexpr float t[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 0.5f, -2, 0},
                                    {0, 1, 1, 0.25f, 4, 0}, {0, 1, -1, 0.125f, -8, 1}};
};
template <> struct At<8, 4> {
  static constexpr float t[4][8] = {{1, 1, 1, 1, 1, 1, 1, 0},
                                    {0, 1, -1, 2, -2, 0.5f, -0.5f, 0},
                                    {0, 1, 1, 4, 4, 0.25f, 0.25f, 0},
                                    {0, 1, -1, 8, -8, 0.125f, -0.125f, 1}};
};

template <int R, int C>
bool Same(const float (&t)[R][C], ffi::Span<const float> given) {
  if (given.size() != static_cast<size_t>(R * C)) return false;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j)
      if (t[i][j] != given[i * C + j]) return false;
  return true;
}

// out[p * so] = sum_k S(p, k) in[k * si] for p < P, k < K: one side of a transform, along
// rows (stride L) or columns (stride 1) of a block of channel vectors. S(p, k) = s[p][k], or
// s[k][p] when transposed; s is a compile-time constant, its zero terms dropped.
template <int P, int K, bool Transposed, int SR, int SC>
inline void Pass(const float (&s)[SR][SC], const v16* in, int si, v16* out, int so) {
  for (int p = 0; p < P; ++p) {
    v16 acc = {};
    for (int k = 0; k < K; ++k) {
      const float c = Transposed ? s[k][p] : s[p][k];
      if (c != 0.f) acc += c * in[k * si];
    }
    out[p * so] = acc;
  }
}

// out[p][q] = sum_k sum_l S(p, k) in[k][l] S(q, l) for a K x L block `in`: the rows first,
// then the columns.
template <int P, int Q, int K, int L, bool Transposed, int SR, int SC>
inline void Sandwich(const float (&s)[SR][SC], const v16 (&in)[K][L], v16 (&out)[P][Q]) {
  v16 mid[P][L];
  for (int l = 0; l < L; ++l) Pass<P, K, Transposed>(s, &in[0][l], L, &mid[0][l], L);
  for (int p = 0; p < P; ++p) Pass<Q, L, Transposed>(s, &mid[p][0], 1, &out[p][0], 1);
}

// Visits every tile and block of channels: f(tile index, image index, window row, window
// column, first channel, channels in the block).
template <typename F>
void ForTiles(const Geometry& g, int m, F f) {
  int64_t t = 0;
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t i = 0; i < g.th; ++i)
      for (int64_t j = 0; j < g.tw; ++j, ++t)
        for (int64_t c0 = 0; c0 < g.c; c0 += kLanes)
          f(t, b, i * m, j * m, c0, std::min(kLanes, g.c - c0));
}

// A tile's a*a positions in the [a*a, T, C] layout: tile t, channels c0 .. c0 + nc.
template <int A>
inline void LoadPositions(const Geometry& g, const float* v, int64_t t, int64_t c0, int64_t nc,
                          v16 (&out)[A][A]) {
  for (int p = 0; p < A; ++p)
    for (int q = 0; q < A; ++q)
      out[p][q] = Load(v + ((p * A + q) * g.tiles() + t) * g.c + c0, nc);
}

template <int A>
inline void StorePositions(const Geometry& g, const v16 (&in)[A][A], int64_t t, int64_t c0,
                           int64_t nc, float* v) {
  for (int p = 0; p < A; ++p)
    for (int q = 0; q < A; ++q)
      Store(v + ((p * A + q) * g.tiles() + t) * g.c + c0, in[p][q], nc);
}

template <int A, int M>
void Input(const Geometry& g, const float* x, float* v) {
  ForTiles(g, M, [&](int64_t t, int64_t b, int64_t y0, int64_t x0, int64_t c0, int64_t nc) {
    v16 d[A][A], out[A][A];
    for (int k = 0; k < A; ++k)
      for (int l = 0; l < A; ++l) {
        const int64_t yy = y0 - g.pad_h + k, xx = x0 - g.pad_w + l;
        d[k][l] = (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w)
                      ? v16{} : Load(x + ((b * g.h + yy) * g.w + xx) * g.c + c0, nc);
      }
    Sandwich<A, A, A, A, false>(B<A>::t, d, out);
    StorePositions<A>(g, out, t, c0, nc, v);
  });
}

template <int A, int M>
void InputT(const Geometry& g, const float* v, float* x) {
  std::fill(x, x + g.image(), 0.f);
  ForTiles(g, M, [&](int64_t t, int64_t n, int64_t y0, int64_t x0, int64_t c0, int64_t nc) {
    v16 in[A][A], d[A][A];
    LoadPositions<A>(g, v, t, c0, nc, in);
    Sandwich<A, A, A, A, true>(B<A>::t, in, d);
    for (int k = 0; k < A; ++k)
      for (int l = 0; l < A; ++l) {
        const int64_t yy = y0 - g.pad_h + k, xx = x0 - g.pad_w + l;
        if (yy < 0 || yy >= g.h || xx < 0 || xx >= g.w) continue;
        float* dst = x + ((n * g.h + yy) * g.w + xx) * g.c + c0;
        Store(dst, Load(dst, nc) + d[k][l], nc);
      }
  });
}

template <int A, int M>
void Output(const Geometry& g, const float* mm, float* y) {
  ForTiles(g, M, [&](int64_t t, int64_t n, int64_t y0, int64_t x0, int64_t c0, int64_t nc) {
    v16 in[A][A], out[M][M];
    LoadPositions<A>(g, mm, t, c0, nc, in);
    Sandwich<M, M, A, A, false>(At<A, M>::t, in, out);
    for (int u = 0; u < M && y0 + u < g.h; ++u)
      for (int w = 0; w < M && x0 + w < g.w; ++w)
        Store(y + ((n * g.h + y0 + u) * g.w + x0 + w) * g.c + c0, out[u][w], nc);
  });
}

template <int A, int M>
void OutputT(const Geometry& g, const float* y, float* mm) {
  ForTiles(g, M, [&](int64_t t, int64_t n, int64_t y0, int64_t x0, int64_t c0, int64_t nc) {
    v16 in[M][M], out[A][A];
    for (int u = 0; u < M; ++u)
      for (int w = 0; w < M; ++w)
        in[u][w] = (y0 + u >= g.h || x0 + w >= g.w)
                       ? v16{} : Load(y + ((n * g.h + y0 + u) * g.w + x0 + w) * g.c + c0, nc);
    Sandwich<A, A, M, M, true>(At<A, M>::t, in, out);
    StorePositions<A>(g, out, t, c0, nc, mm);
  });
}

// Runs f(A, M) (std::integral_constant tile sizes) for F(2x2, 3x3), F(4x4, 3x3), F(2x2, 5x5)
// or F(4x4, 5x5): (a, m) of (4, 2), (6, 4), (6, 2), (8, 4). `given` is the B^T (or, with
// output, A^T) the caller computed: it must be ours.
template <typename F>
ffi::Error Dispatch(int64_t a, int64_t m, bool output, ffi::Span<const float> given, F f) {
  auto run = [&](auto A, auto M) {
    if (!(output ? Same(At<A, M>::t, given) : Same(B<A>::t, given)))
      return ffi::Error::InvalidArgument("winograd: the transform is not the kernel's");
    f(A, M);
    return ffi::Error::Success();
  };
  using std::integral_constant;
  if (a == 4 && m == 2) return run(integral_constant<int, 4>{}, integral_constant<int, 2>{});
  if (a == 6 && m == 4) return run(integral_constant<int, 6>{}, integral_constant<int, 4>{});
  if (a == 6 && m == 2) return run(integral_constant<int, 6>{}, integral_constant<int, 2>{});
  if (a == 8 && m == 4) return run(integral_constant<int, 8>{}, integral_constant<int, 4>{});
  return ffi::Error::InvalidArgument("winograd: no kernel for this tile size");
}

// The geometry of an image array [..., N, H, W, C].
Geometry Image(ffi::Span<const int64_t> dims, int64_t th, int64_t tw, int64_t pad_h,
               int64_t pad_w) {
  const size_t r = dims.size();
  Geometry g{1, dims[r - 4], dims[r - 3], dims[r - 2], dims[r - 1], th, tw, pad_h, pad_w};
  for (size_t i = 0; i + 4 < r; ++i) g.lead *= dims[i];
  return g;
}

int64_t Side(size_t entries) {  // a from a*a
  int64_t a = 1;
  while (a * a < static_cast<int64_t>(entries)) ++a;
  return a;
}

ffi::Error InputImpl(ffi::Buffer<ffi::F32> x, ffi::Span<const float> bt, int64_t pad_h,
                     int64_t pad_w, int64_t th, int64_t tw, int64_t m,
                     ffi::ResultBuffer<ffi::F32> v) {
  const Geometry g = Image(x.dimensions(), th, tw, pad_h, pad_w);
  return Dispatch(Side(bt.size()), m, false, bt, [&](auto A, auto M) {
    for (int64_t l = 0; l < g.lead; ++l)
      Input<A, M>(g, x.typed_data() + l * g.image(), v->typed_data() + l * g.positions(A));
  });
}

ffi::Error InputTImpl(ffi::Buffer<ffi::F32> v, ffi::Span<const float> bt, int64_t pad_h,
                      int64_t pad_w, int64_t th, int64_t tw, int64_t m,
                      ffi::ResultBuffer<ffi::F32> x) {
  const Geometry g = Image(x->dimensions(), th, tw, pad_h, pad_w);
  return Dispatch(Side(bt.size()), m, false, bt, [&](auto A, auto M) {
    for (int64_t l = 0; l < g.lead; ++l)
      InputT<A, M>(g, v.typed_data() + l * g.positions(A), x->typed_data() + l * g.image());
  });
}

ffi::Error OutputImpl(ffi::Buffer<ffi::F32> mm, ffi::Span<const float> at, int64_t th,
                      int64_t tw, int64_t m, ffi::ResultBuffer<ffi::F32> y) {
  const Geometry g = Image(y->dimensions(), th, tw, 0, 0);
  return Dispatch(static_cast<int64_t>(at.size()) / m, m, true, at, [&](auto A, auto M) {
    for (int64_t l = 0; l < g.lead; ++l)
      Output<A, M>(g, mm.typed_data() + l * g.positions(A), y->typed_data() + l * g.image());
  });
}

ffi::Error OutputTImpl(ffi::Buffer<ffi::F32> y, ffi::Span<const float> at, int64_t th,
                       int64_t tw, int64_t m, ffi::ResultBuffer<ffi::F32> mm) {
  const Geometry g = Image(y.dimensions(), th, tw, 0, 0);
  return Dispatch(static_cast<int64_t>(at.size()) / m, m, true, at, [&](auto A, auto M) {
    for (int64_t l = 0; l < g.lead; ++l)
      OutputT<A, M>(g, y.typed_data() + l * g.image(), mm->typed_data() + l * g.positions(A));
  });
}

}  // namespace

#define WINOGRAD_INPUT_BINDING(MATRIX)                                                   \
  ffi::Ffi::Bind()                                                                      \
      .Arg<ffi::Buffer<ffi::F32>>()                                                     \
      .Attr<ffi::Span<const float>>(MATRIX)                                             \
      .Attr<int64_t>("pad_h")                                                           \
      .Attr<int64_t>("pad_w")                                                           \
      .Attr<int64_t>("th")                                                              \
      .Attr<int64_t>("tw")                                                              \
      .Attr<int64_t>("m")                                                               \
      .Ret<ffi::Buffer<ffi::F32>>()

#define WINOGRAD_OUTPUT_BINDING                                                          \
  ffi::Ffi::Bind()                                                                      \
      .Arg<ffi::Buffer<ffi::F32>>()                                                     \
      .Attr<ffi::Span<const float>>("at")                                               \
      .Attr<int64_t>("th")                                                              \
      .Attr<int64_t>("tw")                                                              \
      .Attr<int64_t>("m")                                                               \
      .Ret<ffi::Buffer<ffi::F32>>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(WinogradInput, InputImpl, WINOGRAD_INPUT_BINDING("bt"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(WinogradInputT, InputTImpl, WINOGRAD_INPUT_BINDING("bt"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(WinogradOutput, OutputImpl, WINOGRAD_OUTPUT_BINDING);
XLA_FFI_DEFINE_HANDLER_SYMBOL(WinogradOutputT, OutputTImpl, WINOGRAD_OUTPUT_BINDING);
