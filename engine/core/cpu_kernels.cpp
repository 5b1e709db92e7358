// CPU kernels for the lean runner on x86, compiled on first use by cpu_kernels.py once per instruction set the
// CPU has: the AVX2 + FMA baseline, and AVX-512 (F, BW, VL) where present, picked at run time.
//
// add_rmsnorm, rope_store, silu_mul, gelu_tanh_mul: the elementwise steps between a layer's matmuls, one call each instead of
// the handful of torch ops (and as many dispatches) that each takes, which at this model size cost as much as the
// arithmetic.
//
// decode_attention: one new query token per sequence against that sequence's keys and values, read in place
// from the paged pool (no gather into a padded batch first), float32 throughout. decode_attention_bf16 and
// rope_store_bf16 (at the end) are the same over bf16 pages (--kv-cache-dtype bf16): half the bytes a long
// context's attention streams, widened in registers, so the math stays float32.
//
// linear_bf16: y[b, n] = sum_k x[b, k] * w[n, k] (+ bias[n]), x and y float32, w bfloat16 as stored in the
// checkpoint, accumulation in float32. A decode step reads every weight once, so storing them in bf16 halves the
// bytes it streams; widening bf16 to float32 is exact (a 16-bit shift), so the result is the float32 forward of
// the same weights, up to summation order. Each tile keeps R weight rows in registers against C input rows. It is
// written once over `vf`, the widest float vector of the build: 8 lanes and 16 registers with AVX2, 16 lanes and 32
// registers with AVX-512, which take larger tiles (more multiply-adds per load) and widen 16 weights per shift.
// The other kernels use 256-bit vectors in both builds.

#include <immintrin.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
using vf = __m512;
constexpr int L = 16;
inline vf vzero() { return _mm512_setzero_ps(); }
inline vf vload(const float* p) { return _mm512_loadu_ps(p); }
inline vf vload(const uint16_t* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline float vsum(vf v) { return _mm512_reduce_add_ps(v); }
inline vf vset1(float x) { return _mm512_set1_ps(x); }
inline vf vcodes8(const int8_t* p) {  // L signed 8-bit codes as float32
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
constexpr int TR = 4;  // weight rows per tile in a batch: 4 x 6 accumulators + 4 weights + 1 input of 32 registers
constexpr int TC = 6;  // input rows per tile
#else
using vf = __m256;
constexpr int L = 8;
inline vf vzero() { return _mm256_setzero_ps(); }
inline vf vload(const float* p) { return _mm256_loadu_ps(p); }
inline vf vload(const uint16_t* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline void vstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline float vsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
inline vf vset1(float x) { return _mm256_set1_ps(x); }
inline vf vcodes8(const int8_t* p) {  // L signed 8-bit codes as float32
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
constexpr int TR = 3;  // weight rows per tile in a batch: 3 x 4 accumulators + 3 weights + 1 input of 16 registers
constexpr int TC = 4;  // input rows per tile
#endif

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// e^x for 8 floats: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-5 polynomial (Cephes' expf
// coefficients, about 1 ulp), 2^n built in the exponent bits. Inputs here are <= 0 (scores minus their max).
inline __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// The sums of 8 vectors' lanes, as one vector: lane i holds the sum of a[i].
inline __m256 hsum8(const __m256* a) {
    const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

inline float bf16_to_float(uint16_t h) {
    uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}

inline float widen(uint16_t h) { return bf16_to_float(h); }
inline float widen(float f) { return f; }

// KV pages hold float32 or bf16 (--kv-cache-dtype): 8 positions' worth of a row as float32 either way, a bf16
// element widened exactly in the register (a 16-bit shift), so AVX2-only CPUs read half the bytes at no extra cost.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// A tile's R x C accumulators set to zero (the bf16 / decoded tiles and the quantized direct ones).
template <int R, int C>
inline void zero_tile(vf (&acc)[R][C]) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) acc[r][c] = vzero();
}

// Tiles ahead that the direct (decode) paths prefetch, a line of each row at a time as a tile reaches that line
// itself (bf16 here in `tile`, quantized in `qtile`): spread over the tile rather than one burst at its start (a
// tile of 8 rows of 2048 4-bit weights is 128 lines, far more than a core's fill buffers hold, so most of a burst
// was dropped). One core, one row (bench/quant_gemv.py): 4 bits 22016x2048 0.74x the time of the burst,
// 2048x11008 0.75x, 49152x576 0.81-0.91x, 3072x576 unchanged; 8 bits 0.58-0.67x for those three large shapes
// (SmolLM2's Q8_0 head 5.47 -> 3.68 ms), 3072x576 0.92-1.05x; bf16 0.56-0.62x for 22016x2048, 0.73-0.89x for
// SmolLM2's shapes. 1, 2 and 4 tiles ahead measured alike.
constexpr int PF = 2;

// R weight rows (wr: the first, which is output row n) against C input rows starting at row b. W is uint16_t for
// bf16 rows widened in registers as they load, or float for rows already widened into a per-thread copy that
// stays in L1 (a batch of many input rows then widens each weight row once instead of once per TC input rows).
template <int R, int C, typename W>
void tile(const float* x, const W* wr, const float* bias, float* y, int K, int N, int n, int b) {
    vf acc[R][C];
    zero_tile<R, C>(acc);
    const float* xb = x + static_cast<int64_t>(b) * K;
    int k = 0;
    for (; k + L <= K; k += L) {
        if constexpr (sizeof(W) == 2) {  // bf16 rows streaming from memory: a line of each row PF tiles ahead
            if ((k * 2) % 64 == 0) {
#pragma GCC unroll 16
                for (int r = 0; r < R; ++r)
                    _mm_prefetch(reinterpret_cast<const char*>(wr + static_cast<int64_t>(r + R * PF) * K + k),
                                 _MM_HINT_T0);
            }
        }
        vf wv[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) wv[r] = vload(wr + static_cast<int64_t>(r) * K + k);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            vf xv = vload(xb + static_cast<int64_t>(c) * K + k);
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) acc[r][c] = vfma(wv[r], xv, acc[r][c]);
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) {
            float s = vsum(acc[r][c]);
            for (int kk = k; kk < K; ++kk)
                s += widen(wr[static_cast<int64_t>(r) * K + kk]) * xb[static_cast<int64_t>(c) * K + kk];
            if (bias) s += bias[n + r];
            y[static_cast<int64_t>(b + c) * N + n + r] = s;
        }
    }
}

constexpr int GR = 8;  // weight rows per tile for a single input row (a lone stream's decode)
// Up to DIRECT_ROWS input rows, each weight tile is widened in registers once per TC rows while it sits in L1,
// and the rows PF tiles ahead are prefetched as the tile goes (above); more rows widen each tile once into a
// float32 copy. Measured with
// bench/cpu_kernels.py-style runs of the 30 layers: 16 rows 43 -> 41 ms and 8 rows 27 -> 24 ms against widening
// once from 5 rows up; PF 2 and 4 alike, 2 slightly ahead at 1 row.
constexpr int DIRECT_ROWS = 16;
constexpr int BB = 64;  // input rows per block on the widened path (a prompt chunk beside decodes can be ~300)

template <typename W>
using TileFn = void (*)(const float*, const W*, const float*, float*, int, int, int, int);

template <int R, typename W, int... Cs>
TileFn<W> pick_cols(int c, std::integer_sequence<int, Cs...>) {
    static constexpr TileFn<W> fns[] = {tile<R, Cs + 1, W>...};
    return fns[c - 1];
}

// The tile for R weight rows against c input rows (1 <= c <= TC).
template <int R, typename W>
TileFn<W> pick(int c) {
    return pick_cols<R, W>(c, std::make_integer_sequence<int, TC>{});
}

// ...and for the last tile of a matrix, which may have fewer rows than TR.
template <typename W, int... Rs>
TileFn<W> pick_rows(int rows, int c, std::integer_sequence<int, Rs...>) {
    static constexpr TileFn<W> (*fns[])(int) = {pick<Rs + 1, W>...};
    return fns[rows - 1](c);
}

// One sequence, one KV head, its G query heads (consecutive in q and out). Positions go in blocks that stay in
// L1 while every head uses them: 8 keys for the scores, TB values for the weighted sum.
constexpr int TB = 32;

template <int DC, typename T>
void attend_heads(const float* q, const T* k_pool, const T* v_pool, const int64_t* off, int len,
                  float* out, int G, int D_, float scale, float* s) {
    const int D = DC ? DC : D_;
    int t = 0;
    if (D % 8 == 0) {
        for (; t + 8 <= len; t += 8) {  // 8 positions' dot products, summed across lanes in one go, per head
            for (int g = 0; g < G; ++g) {
                const float* qh = q + static_cast<int64_t>(g) * D;
                __m256 acc[8];
                for (int j = 0; j < 8; ++j) {
                    const T* kt = k_pool + off[t + j];
                    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qh), load8(kt));
                    for (int d = 8; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(qh + d), load8(kt + d), a);
                    acc[j] = a;
                }
                _mm256_storeu_ps(s + static_cast<size_t>(g) * len + t, _mm256_mul_ps(hsum8(acc), _mm256_set1_ps(scale)));
            }
        }
    }
    for (; t < len; ++t) {
        const T* kt = k_pool + off[t];
        for (int g = 0; g < G; ++g) {
            const float* qh = q + static_cast<int64_t>(g) * D;
            float dot = 0.f;
            for (int d = 0; d < D; ++d) dot += qh[d] * widen(kt[d]);
            s[static_cast<size_t>(g) * len + t] = dot * scale;
        }
    }
    std::vector<float> inv(G);
    for (int g = 0; g < G; ++g) {  // softmax numerators in place; 1 / their sum kept for the end
        float* sg = s + static_cast<size_t>(g) * len;
        float m = sg[0];
        for (int i = 1; i < len; ++i) m = sg[i] > m ? sg[i] : m;
        const __m256 mv = _mm256_set1_ps(m);
        __m256 sv = _mm256_setzero_ps();
        int i = 0;
        for (; i + 8 <= len; i += 8) {
            const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(sg + i), mv));
            _mm256_storeu_ps(sg + i, e);
            sv = _mm256_add_ps(sv, e);
        }
        float sum = hsum(sv);
        for (; i < len; ++i) {
            sg[i] = std::exp(sg[i] - m);
            sum += sg[i];
        }
        inv[g] = 1.f / sum;
        for (int d = 0; d < D; ++d) out[static_cast<int64_t>(g) * D + d] = 0.f;
    }
    for (int t0 = 0; t0 < len; t0 += TB) {  // the weighted sum of values
        const int t1 = t0 + TB < len ? t0 + TB : len;
        for (int g = 0; g < G; ++g) {
            const float* sg = s + static_cast<size_t>(g) * len;
            float* o = out + static_cast<int64_t>(g) * D;
            if (DC) {  // the output row lives in registers for the block
                __m256 acc[DC ? DC / 8 : 1];
                for (int i = 0; i < D / 8; ++i) acc[i] = _mm256_loadu_ps(o + 8 * i);
                for (int t2 = t0; t2 < t1; ++t2) {
                    const T* vt = v_pool + off[t2];
                    const __m256 wt = _mm256_set1_ps(sg[t2]);
                    for (int i = 0; i < D / 8; ++i) acc[i] = _mm256_fmadd_ps(wt, load8(vt + 8 * i), acc[i]);
                }
                for (int i = 0; i < D / 8; ++i) _mm256_storeu_ps(o + 8 * i, acc[i]);
            } else {
                for (int t2 = t0; t2 < t1; ++t2) {
                    const T* vt = v_pool + off[t2];
                    for (int d = 0; d < D; ++d) o[d] += sg[t2] * widen(vt[d]);
                }
            }
        }
    }
    for (int g = 0; g < G; ++g)
        for (int d = 0; d < D; ++d) out[static_cast<int64_t>(g) * D + d] *= inv[g];
}

// Positions [first, end) of the pages list: first > 0 for a sliding-window layer, whose window starts inside the
// list's first page.
template <typename T>
void attend_one(const float* q, const T* k_pool, const T* v_pool, const int32_t* pages, int first, int end,
                float* out, int G, int KV, int kvh, int D, int page, float scale, int dc, std::vector<float>& s,
                std::vector<int64_t>& off) {
    const int len = end - first;
    s.resize(static_cast<size_t>(G) * len);
    off.resize(len);
    for (int t = 0, p = first / page, slot = first % page; t < len; ++t) {  // where each position's row sits
        off[t] = ((static_cast<int64_t>(pages[p]) * page + slot) * KV + kvh) * D;
        if (++slot == page) slot = 0, ++p;
    }
    if (dc == 64) attend_heads<64>(q, k_pool, v_pool, off.data(), len, out, G, D, scale, s.data());
    else if (dc == 128) attend_heads<128>(q, k_pool, v_pool, off.data(), len, out, G, D, scale, s.data());
    else attend_heads<0>(q, k_pool, v_pool, off.data(), len, out, G, D, scale, s.data());
}

// Quantized rows for linear_q: each row's weights in blocks of 32 (QB), w = q * scale + min per group of `group`
// weights (a multiple of QB), scale and min float32 [N, K / group]. 4 bits: a block's 16 bytes hold weight j in
// byte j's low nibble and weight j + 16 in its high one (GGUF's Q4_0 / Q4_1 / Q4_K order, so their blocks copy
// straight in); 8 bits: one signed byte a weight. Decoded into float32 in L1, then the same tiles as bf16 rows.
constexpr int QB = 32;

// A group's scale or min: float32, or IEEE half (the scales of quantize-at-load and of GGUF's Q4_0 / Q4_1 / Q8_0,
// which are half already), widened exactly by bit arithmetic (no F16C needed).
inline float widen_scale(float f) { return f; }
inline float widen_scale(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);  // exact, one instruction (every AVX2 CPU has F16C)
#else
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 31, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 31) {
        bits = sign | 0x7f800000 | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else {  // zero or subnormal: man * 2^-24
        float f = static_cast<float>(man) * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
#endif
}

template <typename S>
inline void decode_q4(const uint8_t* q, const S* sc, const S* mn, float* out, int K, int group) {
    for (int kb = 0; kb < K; kb += QB) {
        const int gi = kb / group;
        const uint8_t* b = q + kb / 2;
        const float s1 = widen_scale(sc[gi]), m1 = widen_scale(mn[gi]);
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
        const __m512 s = _mm512_set1_ps(s1), m = _mm512_set1_ps(m1);
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
        const __m512i lo = _mm512_and_si512(v, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(v, 4);
        _mm512_storeu_ps(out + kb, _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), s, m));
        _mm512_storeu_ps(out + kb + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), s, m));
#else
        const __m256 s = _mm256_set1_ps(s1), m = _mm256_set1_ps(m1);
        for (int h = 0; h < 2; ++h) {
            const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * h)));
            const __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(15)), hi = _mm256_srli_epi32(v, 4);
            _mm256_storeu_ps(out + kb + 8 * h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), s, m));
            _mm256_storeu_ps(out + kb + 16 + 8 * h, _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), s, m));
        }
#endif
    }
}

// 8 bits: groups of 16 (GGUF's Q6_K sub-blocks) or any multiple of 32.
template <typename S>
inline void decode_q8(const int8_t* q, const S* sc, const S* mn, float* out, int K, int group) {
    for (int k8 = 0; k8 < K; k8 += 8) {
        const int gi = k8 / group;
        const __m256 s = _mm256_set1_ps(widen_scale(sc[gi]));
        const __m256 m = mn ? _mm256_set1_ps(widen_scale(mn[gi])) : _mm256_setzero_ps();
        const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + k8)));
        _mm256_storeu_ps(out + k8, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), s, m));
    }
}

// The direct path of linear_quant, for fewer than QDIRECT_ROWS input rows (decode steps): each block of 32 weights
// of R rows is decoded in registers, QC vectors of L weights a row, to exactly the float32 values decode_q4 /
// decode_q8 write (the same fused multiply-add of code, scale and min), and multiplied into the same accumulators
// in the same order as `tile` over a decoded copy: so a row's result is bit-identical on both paths, whatever the
// batch, while the packed bytes are read once and never stored (the decoded copy's store and reload cost more than
// the arithmetic: 2 GB/s against the memory's 12-14 here).
// The rows are shared out `guided` (shrinking chunks taken as threads come free), not statically: on 2 cores the
// server's own threads (the event loop streaming tokens, the client) preempt one member of the team now and then,
// and a static half waits for it; SmolLM2's single stream went from 26.6-41.9 ms a token (the thread tuner
// switching 2 -> 1 -> 2 -> 1 threads) to 21.6-22.2 ms with no switch (bench/README.md).
// Both paths give the same numbers, so the row count where one hands over to the other is a speed choice alone:
// measured on one core of the Xeon (3072 x 576, 4 and 8 bits), the direct path takes 0.25-0.9x the time of the
// decoded copy's up to 15 rows with AVX-512, and with AVX2's 16 registers 0.4-0.98x up to 8 rows, 1.2-1.4x
// from 12.
constexpr int QC = QB / L;  // vectors a block
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
constexpr int QDIRECT_ROWS = 16;
constexpr int QTR = 4, QTC = 4, QGR = 8;  // (2 x 4 weights + 4 x 4 accumulators, or 2 x 8 + 8) + 1 input of 32
#else
constexpr int QDIRECT_ROWS = 9;
constexpr int QTR = 1, QTC = 4, QGR = 2;  // 4 weights + 4 accumulators (or 4 x 2 + 2) + 1 input of 16
#endif

// A row's scales or mins as float32 (the half ones widened 8 at a time), so the tiles broadcast them straight from
// memory (a load, not a shuffle) for every block.
inline const float* scales_f32(const float* src, int, float*) { return src; }
inline const float* scales_f32(const uint16_t* src, int G, float* out) {
    int i = 0;
    for (; i + 8 <= G; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < G; ++i) out[i] = widen_scale(src[i]);
    return out;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// A block of 32 weights of a row in registers, to exactly the values decode_q4 / decode_q8 write: the AMX path's
// decode (the direct path's tiles, qtile4 and qtile8 below, do the same a group at a time).
inline void q_block(const uint8_t* rowq, const float* sc, const float* mn, int kb, int group, int bits, vf* w) {
    if (bits == 4) {
        const int gi = kb / group;
        const uint8_t* b = rowq + kb / 2;
        // The block's 16 possible weights, fma(code, scale, min) for codes 0..15 (the same rounding as decoding
        // each weight), then each weight looked up by its nibble: vpermps reads an index's low 4 bits only.
        const __m512 lut = _mm512_fmadd_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_ps(sc[gi]), _mm512_set1_ps(mn[gi]));
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
        w[0] = _mm512_permutexvar_ps(v, lut);
        w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
        return;
    }
    const int8_t* q = reinterpret_cast<const int8_t*>(rowq) + kb;
#pragma GCC unroll 4
    for (int j = 0; j < QC; ++j) {  // a vector never spans two groups: groups are 16 or a multiple of 32
        const int gi = (kb + j * L) / group;
        w[j] = _mm512_fmadd_ps(vcodes8(q + j * L), _mm512_set1_ps(sc[gi]), _mm512_set1_ps(mn ? mn[gi] : 0.f));
    }
}
#endif

// qtile (below) for 8-bit codes, the path of Q8_0 and Q6_K blocks and of the 8-bit codes other K-quants are kept as: the
// same fused multiply-adds in the same order (each row's vectors along K into one accumulator per input row), so
// the same bits, with the group's scales and mins loaded once per group and held in registers (`Min`: the rows
// have mins) instead of the general tile's per-vector group index, min test and row pointers, which the compiler
// kept on the stack. On the 2-core Xeon: 1.16 -> 0.94 ns a vector of 16 weights from L2, and Gemma 3 270M's Q8_0
// output head (262,144 x 640, 178 MB) 7.7-8.8 -> 6.6-7.1 ms a decode row (bench/README.md).
template <int R, int C, bool Min>
void qtile8(const float* x, const uint8_t* wq, const float* const* sf, const float* const* mf, const float* bias,
            float* y, int K, int N, int n, int b, int group) {
    vf acc[R][C];
    zero_tile<R, C>(acc);
    const float* xb = x + static_cast<int64_t>(b) * K;
    const int8_t* q = reinterpret_cast<const int8_t*>(wq) + static_cast<int64_t>(n) * K;
    const int8_t* end = reinterpret_cast<const int8_t*>(wq) + static_cast<int64_t>(N) * K;
    const int64_t ahead = static_cast<int64_t>(R) * PF * K;  // the same bytes PF tiles on
    for (int g = 0, k = 0; k < K; ++g) {
        vf s[R], m[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            s[r] = vset1(sf[r][g]);
            m[r] = Min ? vset1(mf[r][g]) : vzero();
        }
        for (const int stop = k + group; k < stop; k += L) {
            if (k % 64 == 0) {  // a line of each row PF tiles ahead, one per line this tile reads
#pragma GCC unroll 16
                for (int r = 0; r < R; ++r) {
                    const int8_t* line = q + static_cast<int64_t>(r) * K + k + ahead;
                    if (line < end) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
                }
            }
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
                const vf w = vfma(vcodes8(q + static_cast<int64_t>(r) * K + k), s[r], m[r]);
#pragma GCC unroll 16
                for (int c = 0; c < C; ++c) acc[r][c] = vfma(w, vload(xb + static_cast<int64_t>(c) * K + k), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) {
            float sum = vsum(acc[r][c]);
            if (bias) sum += bias[n + r];
            y[static_cast<int64_t>(b + c) * N + n + r] = sum;
        }
    }
}

// qtile (below) for 4-bit codes, the path of Q4_0, Q4_1, the K-quants' 4-bit blocks and `int4`: the same
// arithmetic as q_block's, its table of a group's 16 weights (AVX-512) or its scale and min (AVX2) made once per
// group instead of once per block of 32, and the rows addressed from one pointer.
template <int R, int C>
void qtile4(const float* x, const uint8_t* wq, const float* const* sf, const float* const* mf, const float* bias,
            float* y, int K, int N, int n, int b, int group) {
    vf acc[R][C];
    zero_tile<R, C>(acc);
    const float* xb = x + static_cast<int64_t>(b) * K;
    const int64_t row_bytes = K / 2;
    const uint8_t* q = wq + static_cast<int64_t>(n) * row_bytes;
    const uint8_t* end = wq + static_cast<int64_t>(N) * row_bytes;
    const int64_t ahead = static_cast<int64_t>(R) * PF * row_bytes;  // the same bytes PF tiles on
    for (int g = 0, k = 0; k < K; ++g) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
        const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        vf lut[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) lut[r] = _mm512_fmadd_ps(codes, vset1(sf[r][g]), vset1(mf[r][g]));
#else
        vf s[R], m[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) s[r] = vset1(sf[r][g]), m[r] = vset1(mf[r][g]);
#endif
        for (const int stop = k + group; k < stop; k += QB) {
            const int64_t at = k / 2;
            if (at % 64 == 0) {  // a line of each row PF tiles ahead, one per line this tile reads
#pragma GCC unroll 16
                for (int r = 0; r < R; ++r) {
                    const uint8_t* line = q + r * row_bytes + at + ahead;
                    if (line < end) _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
                }
            }
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) {
                const uint8_t* blk = q + r * row_bytes + at;
                vf w[QC];
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
                const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
                w[0] = _mm512_permutexvar_ps(v, lut[r]);
                w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut[r]);
#else
                const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk)));
                const __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 8)));
                const __m256i f = _mm256_set1_epi32(15);
                w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v0, f)), s[r], m[r]);
                w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v1, f)), s[r], m[r]);
                w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4)), s[r], m[r]);
                w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4)), s[r], m[r]);
#endif
#pragma GCC unroll 4
                for (int j = 0; j < QC; ++j)
#pragma GCC unroll 16
                    for (int c = 0; c < C; ++c)
                        acc[r][c] = vfma(w[j], vload(xb + static_cast<int64_t>(c) * K + k + j * L), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) {
            float sum = vsum(acc[r][c]);
            if (bias) sum += bias[n + r];
            y[static_cast<int64_t>(b + c) * N + n + r] = sum;
        }
    }
}

// R weight rows from row n against C input rows from row b, K a multiple of 32 (the caller pads): the rows'
// scales and mins as float32, then qtile4 or qtile8.
template <int R, int C, typename S>
void qtile(const float* x, const uint8_t* wq, const S* scale, const S* minv, const float* bias, float* y, int K, int N,
           int n, int b, int group, int bits) {
    const int G = K / group;
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(2 * R) * G);
    const float* sf[R];
    const float* mf[R];
    for (int r = 0; r < R; ++r) {
        sf[r] = scales_f32(scale + static_cast<int64_t>(n + r) * G, G, buf.data() + r * G);
        mf[r] = minv ? scales_f32(minv + static_cast<int64_t>(n + r) * G, G, buf.data() + (R + r) * G) : nullptr;
    }
    if (bits == 4)
        qtile4<R, C>(x, wq, sf, mf, bias, y, K, N, n, b, group);
    else if (minv)
        qtile8<R, C, true>(x, wq, sf, mf, bias, y, K, N, n, b, group);
    else
        qtile8<R, C, false>(x, wq, sf, mf, bias, y, K, N, n, b, group);
}

template <typename S>
using QTileFn = void (*)(const float*, const uint8_t*, const S*, const S*, const float*, float*, int, int, int, int, int,
                         int);

template <int R, typename S, int... Cs>
QTileFn<S> qpick_cols(int c, std::integer_sequence<int, Cs...>) {
    static constexpr QTileFn<S> fns[] = {qtile<R, Cs + 1, S>...};
    return fns[c - 1];
}

// The direct tile for R (1, QTR or QGR) weight rows against c input rows (1 <= c <= QTC).
template <typename S>
QTileFn<S> qpick(int R, int c) {
    const auto cols = std::make_integer_sequence<int, QTC>{};
    return R == 1 ? qpick_cols<1, S>(c, cols) : R == QTR ? qpick_cols<QTR, S>(c, cols) : qpick_cols<QGR, S>(c, cols);
}

template <typename S>
void linear_quant_direct(const float* x, const uint8_t* wq, const S* scale, const S* minv, const float* bias, float* y,
                         int B, int K, int N, int group, int bits, int threads) {
    const int R = B == 1 ? QGR : QTR;
    const int tiles = N / R;
#pragma omp parallel for schedule(guided) num_threads(threads)
    for (int t = 0; t < tiles + (N % R); ++t) {
        const int n = t < tiles ? t * R : tiles * R + (t - tiles);  // then the rows after the last whole tile
        for (int b = 0; b < B; b += QTC) {
            const int c = B - b < QTC ? B - b : QTC;
            qpick<S>(t < tiles ? R : 1, c)(x, wq, scale, minv, bias, y, K, N, n, b, group, bits);
        }
    }
}

// x [B, K] float32; wq [N, K / 2] (bits 4) or [N, K] (bits 8) as above, K a multiple of `group` and of 32;
// scale, minv [N, K / group] of S (float32 or half; minv null for 8 bits without offset); bias [N] float32 or
// null; y [B, N] float32. Every row tile is decoded once per block of BB input rows (one pass over the packed bytes
// for a decode step), then multiplied as bf16 tiles are.
template <typename S>
void linear_quant(const float* x, const uint8_t* wq, const S* scale, const S* minv, const float* bias, float* y,
                  int B, int K, int N, int group, int bits, int threads) {
    if (B < QDIRECT_ROWS) return linear_quant_direct(x, wq, scale, minv, bias, y, B, K, N, group, bits, threads);
    const int64_t row_bytes = bits == 4 ? K / 2 : K;
    const int G = K / group;
    const int tiles = (N + TR - 1) / TR;
#pragma omp parallel num_threads(threads)
    {
        std::vector<float> wf(static_cast<size_t>(TR) * K);
        for (int b0 = 0; b0 < B; b0 += BB) {
            const int b1 = B - b0 < BB ? B : b0 + BB;
            // guided, not static halves: a neighbour preempting one member (see linear_quant_amx)
#pragma omp for schedule(guided)
            for (int t = 0; t < tiles; ++t) {
                const int n = t * TR, R = N - n < TR ? N - n : TR;
                if (t + PF < tiles) {
                    const char* ahead = reinterpret_cast<const char*>(wq + static_cast<int64_t>(n + PF * TR) * row_bytes);
                    const int64_t rows_ahead = N - n - PF * TR < TR ? N - n - PF * TR : TR;
                    for (int64_t off = 0; off < rows_ahead * row_bytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
                }
                for (int r = 0; r < R; ++r) {
                    const int64_t row = n + r;
                    if (bits == 4)
                        decode_q4(wq + row * row_bytes, scale + row * G, minv + row * G, wf.data() + r * K, K, group);
                    else
                        decode_q8(reinterpret_cast<const int8_t*>(wq + row * row_bytes), scale + row * G,
                                  minv ? minv + row * G : nullptr, wf.data() + r * K, K, group);
                }
                for (int b = b0; b < b1; b += TC) {
                    const int c = b1 - b < TC ? b1 - b : TC;
                    const TileFn<float> fn = pick_rows<float>(R, c, std::make_integer_sequence<int, TR>{});
                    fn(x, wf.data(), bias, y, K, N, n, b);
                }
            }
        }
    }
}

// ---- linear_q on AMX tiles (a choice of quant.calibrate from SPLIT_ROWS rows, where the CPU has AMX-BF16) --------
// From 16 rows a step is compute-bound, and the float32 multiply-adds of the decoded-copy path (16 a vector
// instruction) fall 2-3x behind oneDNN's bf16 matmul on AMX, which needs a bf16 copy of the matrix. This path keeps
// the packed blocks and does the same as oneDNN: each strip of 16 weight rows is decoded once a call, block by
// block in registers as `q_block` decodes it, rounded to bf16 into an L2-resident strip, and multiplied by AMX
// (`tdpbf16ps`: 16 x 16 outputs a 32-deep bf16 dot product, float32 accumulation) against the input rows rounded to
// bf16: the weights are the A operand (16 rows x 32 of K, as decoded), the inputs the B operand, laid out once a
// call as the instruction wants them (pairs of K interleaved per input row). Numbers are those of bf16 dot products
// (quant.calibrate keeps them to the range from SPLIT_ROWS, where every row of a step takes the same path).
// Measured on 2 cores of the Xeon (bench/quant_kernels.py --shape qwen3b, bench/README.md), from 16 rows: 2.3-5.4x
// the decoded-copy path's speed, 0.44-1.5x oneDNN's bf16 matmul on a bf16 copy of the matrix.
// What it took: decoding a row at a time into rows a line more than K apart (a tile at a time, 1 KB apart, cost a
// third more), the group index counted rather than divided, and two accumulators over K for each input tile.
// Tried and slower: fusing the decode of a tile with its product (a tile load does not take data from stores in
// flight); no faster: prefetching the next strip's rows while the tiles multiply.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512bf16")))
constexpr int AMX_BLOCKS = 2;  // input-row tiles of 16 a pass (2 accumulators each: tiles 0-3; weights 4, inputs 5)

struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Accumulator tile C += the weight tile (in tile 4) x the input tile at x (loaded into tile 5); the tile
// intrinsics take their register numbers as literals, hence macros.
#define AMX_DP(C, x)              \
    do {                          \
        _tile_loadd(5, (x), 64);  \
        _tile_dpbf16ps(C, 4, 5);  \
    } while (0)

// One weight row decoded as q_block decodes it (the same float32 values), rounded to bf16, K of them at dst. The
// group index advances by counting blocks (a division a block cost a third of the decode).
AMX_TARGET inline void decode_row_bf16(const uint8_t* rowq, const float* sf, const float* mf, int K, int group,
                                       int bits, uint16_t* dst) {
    const int per_group = group / QB;  // blocks a group; 0 for groups of 16 (Q6_K), which q_block handles
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int gi = 0, left = per_group;
    for (int kb = 0; kb < K; kb += QB) {
        __m512 w0, w1;
        if (bits == 4 && per_group) {
            const __m512 lut = _mm512_fmadd_ps(iota, _mm512_set1_ps(sf[gi]), _mm512_set1_ps(mf[gi]));
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rowq + kb / 2)));
            w0 = _mm512_permutexvar_ps(v, lut);
            w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut);
        } else if (per_group) {
            const __m512 s = _mm512_set1_ps(sf[gi]), m = mf ? _mm512_set1_ps(mf[gi]) : _mm512_setzero_ps();
            const int8_t* q = reinterpret_cast<const int8_t*>(rowq) + kb;
            const __m128i* v = reinterpret_cast<const __m128i*>(q);
            w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(v))), s, m);
            w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(v + 1))), s, m);
        } else {
            vf w[QC];
            q_block(rowq, sf, mf, kb, group, bits, w);
            w0 = w[0], w1 = w[1];
        }
        _mm512_storeu_si512(dst + kb, (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
        if (--left == 0) ++gi, left = per_group;
    }
}

template <typename S>
AMX_TARGET void linear_quant_amx(const float* x, const uint8_t* wq, const S* scale, const S* minv, const float* bias,
                                 float* y, int B, int K, int N, int group, int bits, int threads) {
    const int KS = K / QB, blocks = (B + 15) / 16;
    // inputs: per 16-row block and step of 32 of K, a 1 KB tile: 16 pairs of K x 16 rows x 2. A row's 32 inputs
    // round to 16 pairs in one instruction (to nearest even, as the weights are), then the 16 x 16 pairs are
    // transposed: a scalar rounding and store per input cost the 0.5B shape's down projection (896 x 4864) 0.244
    // ms a call at 16 rows against 0.217 now, 0.472 against 0.411 at 32.
    std::vector<uint16_t> xv(static_cast<size_t>(blocks) * KS * 512);
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int t = 0; t < blocks * KS; ++t) {
        const int blk = t / KS, ks = t % KS;
        uint32_t* tile = reinterpret_cast<uint32_t*>(xv.data() + static_cast<size_t>(t) * 512);
        alignas(64) uint32_t pairs[16][16];  // [input row][pair of K]
        for (int c = 0; c < 16; ++c) {
            const int b = blk * 16 + c;
            const float* row = x + static_cast<int64_t>(b) * K + ks * 32;
            const __m512i v = b < B ? (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 16), _mm512_loadu_ps(row))
                                    : _mm512_setzero_si512();
            _mm512_store_si512(pairs[c], v);
        }
        for (int p = 0; p < 16; ++p)
            for (int c = 0; c < 16; ++c) tile[p * 16 + c] = pairs[c][p];
    }
    const int64_t row_bytes = bits == 4 ? K / 2 : K;
    const int G = K / group;
    const int strips = (N + 15) / 16;
#pragma omp parallel num_threads(threads)
    {
        TileConfig cfg;
        for (int t = 0; t < 6; ++t) cfg.rows[t] = 16, cfg.colsb[t] = 64;
        _tile_loadconfig(&cfg);
        // The 16 weight rows, a row after the other, a line apart more than K (tile loads 16 rows a pitch apart: a
        // pitch of 4 KB would put them all in one set of L1)
        const int P = K + 32;
        std::vector<uint16_t> strip(static_cast<size_t>(16) * P);
        std::vector<float> sc(2 * static_cast<size_t>(G));
        alignas(64) float out[4][16 * 16];
        // Strips shared out `guided`, as linear_quant_direct's rows are: with a neighbour taking 30% of one core
        // (a busy loop, 3 ms in 10), 9728 x 896 at 16 rows took 0.95-0.99 ms a call on average against 1.17-1.30
        // with static halves (0.60-0.63 either way on idle cores), on 2 cores of the Xeon.
#pragma omp for schedule(guided)
        for (int s = 0; s < strips; ++s) {
            const int n0 = s * 16, R = N - n0 < 16 ? N - n0 : 16;
            for (int r = 0; r < 16; ++r) {
                uint16_t* dst = strip.data() + static_cast<size_t>(r) * P;
                if (r >= R) {  // rows past N: zeros
                    for (int ks = 0; ks < KS; ++ks) _mm512_storeu_si512(dst + ks * 32, _mm512_setzero_si512());
                    continue;
                }
                const int64_t row = n0 + r;
                const float* sf = scales_f32(scale + row * G, G, sc.data());
                const float* mf = minv ? scales_f32(minv + row * G, G, sc.data() + G) : nullptr;
                decode_row_bf16(wq + row * row_bytes, sf, mf, K, group, bits, dst);
            }
            for (int b0 = 0; b0 < blocks; b0 += AMX_BLOCKS) {
                const int nb = blocks - b0 < AMX_BLOCKS ? blocks - b0 : AMX_BLOCKS;
                // Each input tile's sums over K in two accumulators, the even steps of 32 in one and the odd ones in
                // the other (one accumulator's steps wait on each other), added at the end: the same order for
                // every input row whatever the batch, so a row's numbers do not depend on the rows beside it.
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
                const size_t next = static_cast<size_t>(KS) * 512;  // from one input block's tile to the next one's
                for (int ks = 0; ks < KS; ks += 2) {
                    const uint16_t* xs = xv.data() + (static_cast<size_t>(b0) * KS + ks) * 512;
                    _tile_loadd(4, strip.data() + ks * 32, 2 * P);
                    AMX_DP(0, xs);
                    if (nb > 1) AMX_DP(1, xs + next);
                    if (ks + 1 < KS) {
                        _tile_loadd(4, strip.data() + (ks + 1) * 32, 2 * P);
                        AMX_DP(2, xs + 512);
                        if (nb > 1) AMX_DP(3, xs + next + 512);
                    }
                }
                _tile_stored(0, out[0], 64);
                _tile_stored(1, out[1], 64);
                _tile_stored(2, out[2], 64);
                _tile_stored(3, out[3], 64);
                for (int j = 0; j < nb; ++j)  // out[j] + out[2 + j], [r][c]: weight row n0 + r, input (b0 + j) * 16 + c
                    for (int c = 0; c < 16; ++c) {
                        const int b = (b0 + j) * 16 + c;
                        if (b >= B) break;
                        for (int r = 0; r < R; ++r) {
                            const float sum = out[j][r * 16 + c] + out[2 + j][r * 16 + c];
                            y[static_cast<int64_t>(b) * N + n0 + r] = sum + (bias ? bias[n0 + r] : 0.f);
                        }
                    }
            }
        }
        _tile_release();
    }
}

// Whether AMX tiles can be used here: Linux lends the tile registers to a process that asks (arch_prctl
// ARCH_REQ_XCOMP_PERM for XTILEDATA, once; oneDNN asks the same in this process when torch's bf16 matmuls use
// AMX), and faults a process that uses them without asking.
AMX_TARGET int amx_permitted() {
    constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
#endif

// decode_attention over pages of float32 or bf16 (T), one task per sequence and KV head.
template <typename T>
void decode_pages(const float* q, const T* k_pool, const T* v_pool, const int32_t* table, int W, const int32_t* lens,
                  const int32_t* starts, float* out, int B, int H, int KV, int D, int page, float scale, int threads) {
    const int G = H / KV;
    // Fewer (sequence, KV head) pairs than threads (one stream of a model with one KV head, as Gemma 3 270M): each
    // pair's query heads are shared out in parts, so that every thread has work. A head's arithmetic is the same
    // whichever part it is in, so the numbers do not change. Gemma 3 270M's 4 heads of 256 over 300 positions on
    // 2 threads: 47.0 -> 28.7 us a call with float32 pages, 60.6 -> 37.1 with bf16 (18 calls a token).
    const int pairs = B * KV, parts = pairs < threads ? std::min(G, (threads + pairs - 1) / pairs) : 1;
#pragma omp parallel num_threads(threads)
    {
        std::vector<float> s;
        std::vector<int64_t> off;
#pragma omp for schedule(dynamic)
        for (int task = 0; task < pairs * parts; ++task) {
            const int pair = task / parts, part = task % parts, b = pair / KV, kvh = pair % KV, len = lens[b];
            const int g0 = G * part / parts, g1 = G * (part + 1) / parts;
            const int dc = D == 64 ? 64 : D == 128 ? 128 : 0;
            const int64_t head = static_cast<int64_t>(b) * H + static_cast<int64_t>(kvh) * G + g0;
            attend_one(q + head * D, k_pool, v_pool, table + static_cast<int64_t>(b) * W, starts ? starts[b] : 0, len,
                       out + head * D, g1 - g0, KV, kvh, D, page, scale, dc, s, off);
        }
    }
}

// A float32 into a KV page of float32, or of bf16 rounded to nearest even as torch's `.to(torch.bfloat16)` rounds
// (a NaN stays a NaN).
inline void put(float* p, float x) { *p = x; }
inline void put(uint16_t* p, float x) {
    uint32_t u;
    __builtin_memcpy(&u, &x, 4);
    *p = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u)
                                         : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// rope_store over pages of float32 or bf16 (T): q stays float32, k and v are rounded into the pages.
template <typename T>
void rope_rows(const float* qkv, const float* cos, const float* sin, const int64_t* slots, float* q_out, T* k_pool,
               T* v_pool, int N, int H, int KV, int D, const float* wq, const float* wk, float eps) {
    const int half = D / 2, width = (H + 2 * KV) * D;
    std::vector<float> normed(wq ? D : 0);
    for (int n = 0; n < N; ++n) {
        const float* row = qkv + static_cast<int64_t>(n) * width;
        const float* c = cos + static_cast<int64_t>(n) * D;
        const float* s = sin + static_cast<int64_t>(n) * D;
        auto rope = [&](const float* x, auto* o, const float* w) {
            if (w) {  // the head's RMSNorm first (Qwen3, Gemma 3): x / sqrt(mean(x^2) + eps) * w
                float ss = 0.f;
                for (int i = 0; i < D; ++i) ss += x[i] * x[i];
                const float r = 1.f / std::sqrt(ss / D + eps);
                for (int i = 0; i < D; ++i) normed[i] = x[i] * r * w[i];
                x = normed.data();
            }
            for (int i = 0; i < half; ++i) {
                put(o + i, x[i] * c[i] - x[i + half] * s[i]);
                put(o + i + half, x[i + half] * c[i + half] + x[i] * s[i + half]);
            }
        };
        for (int h = 0; h < H; ++h) rope(row + h * D, q_out + (static_cast<int64_t>(n) * H + h) * D, wq);
        T* kd = k_pool + slots[n] * KV * D;
        T* vd = v_pool + slots[n] * KV * D;
        for (int h = 0; h < KV; ++h) rope(row + (H + h) * D, kd + h * D, wk);
        for (int i = 0; i < KV * D; ++i) put(vd + i, row[(H + KV) * D + i]);
    }
}

}  // namespace

extern "C" {

// x [B, K] float32, w [N, K] bf16 bits, bias [N] float32 or null, y [B, N] float32; all contiguous.
void linear_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int B, int K, int N, int threads) {
    if (B <= DIRECT_ROWS) {  // one pass over the weights, widened in registers as they stream
        const int R = B == 1 ? GR : TR;
        const int tiles = N / R;
#pragma omp parallel for schedule(guided) num_threads(threads)
        for (int t = 0; t < tiles + (N % R); ++t) {
            const int n = t < tiles ? t * R : tiles * R + (t - tiles);  // then the rows after the last whole tile
            for (int b = 0; b < B; b += TC) {  // the tile's rows stay in L1 for the next TC input rows
                const int c = B - b < TC ? B - b : TC;
                const TileFn<uint16_t> fn = t >= tiles ? pick<1, uint16_t>(c)
                                            : R == GR  ? pick<GR, uint16_t>(c)
                                                       : pick<TR, uint16_t>(c);
                fn(x, w + static_cast<int64_t>(n) * K, bias, y, K, N, n, b);
            }
        }
        return;
    }
    const int tiles = (N + TR - 1) / TR;
#pragma omp parallel num_threads(threads)
    {
        std::vector<float> wf(static_cast<size_t>(TR) * K);
        for (int b0 = 0; b0 < B; b0 += BB) {  // input rows in blocks that stay in L2 while the weights pass
            const int b1 = B - b0 < BB ? B : b0 + BB;
            // guided, not static halves: a neighbour preempting one member (see linear_quant_amx)
#pragma omp for schedule(guided)
            for (int t = 0; t < tiles; ++t) {
                const int n = t * TR, R = N - n < TR ? N - n : TR;
                const uint16_t* src = w + static_cast<int64_t>(n) * K;
                if (t + 1 < tiles) {  // the next tile's rows, fetched while this one computes
                    const char* next = reinterpret_cast<const char*>(src + static_cast<int64_t>(TR) * K);
                    const int64_t bytes = static_cast<int64_t>(N - n - TR < TR ? N - n - TR : TR) * K * 2;
                    for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
                }
                int i = 0;
                for (; i + L <= R * K; i += L) vstore(wf.data() + i, vload(src + i));
                for (; i < R * K; ++i) wf[i] = bf16_to_float(src[i]);
                for (int b = b0; b < b1; b += TC) {
                    const int c = b1 - b < TC ? b1 - b : TC;
                    const TileFn<float> fn = pick_rows<float>(R, c, std::make_integer_sequence<int, TR>{});
                    fn(x, wf.data(), bias, y, K, N, n, b);
                }
            }
        }
    }
}

// q [B, H, D]; k_pool, v_pool [pages, page, KV, D]; table [B, W] page ids; lens [B] tokens to attend to
// (the new one included); out [B, H, D]. Query heads h*G .. h*G+G-1 share key/value head h (G = H / KV), so
// each task reads one sequence's keys and values for one KV head, for all the queries that use it.
// starts: null, or each row's first position to attend (a sliding window's start) in its table row.
void decode_attention(const float* q, const float* k_pool, const float* v_pool, const int32_t* table, int W,
                      const int32_t* lens, const int32_t* starts, float* out, int B, int H, int KV, int D, int page,
                      float scale, int threads) {
    decode_pages(q, k_pool, v_pool, table, W, lens, starts, out, B, H, KV, D, page, scale, threads);
}

// x [N, D] += delta (when given), then y = x / sqrt(mean(x^2) + eps) * w: a residual add and the next RMSNorm.
void add_rmsnorm(float* x, const float* delta, const float* w, float* y, int N, int D, float eps) {
    for (int n = 0; n < N; ++n) {
        float* xr = x + static_cast<int64_t>(n) * D;
        float* yr = y + static_cast<int64_t>(n) * D;
        if (delta) {
            const float* dr = delta + static_cast<int64_t>(n) * D;
            for (int d = 0; d < D; ++d) xr[d] += dr[d];
        }
        float ss = 0.f;
        for (int d = 0; d < D; ++d) ss += xr[d] * xr[d];
        const float r = 1.f / std::sqrt(ss / D + eps);
        for (int d = 0; d < D; ++d) yr[d] = w[d] * (xr[d] * r);
    }
}

// qkv [N, (H + 2 KV) D] -> rotary embedding (cos, sin [N, D]; the rotate-half form) on q and k; q to q_out
// [N, H, D]; k and v written to row slots[n] of the pools, [rows, KV, D].
void rope_store(const float* qkv, const float* cos, const float* sin, const int64_t* slots, float* q_out,
                float* k_pool, float* v_pool, int N, int H, int KV, int D, const float* wq, const float* wk,
                float eps) {
    rope_rows(qkv, cos, sin, slots, q_out, k_pool, v_pool, N, H, KV, D, wq, wk, eps);
}

// gate_up [N, 2 I] (gate then up) -> out [N, I] = silu(gate) * up.
void silu_mul(const float* gate_up, float* out, int N, int I) {
    for (int n = 0; n < N; ++n) {
        const float* g = gate_up + static_cast<int64_t>(n) * 2 * I;
        const float* u = g + I;
        float* o = out + static_cast<int64_t>(n) * I;
        int i = 0;
        for (; i + 8 <= I; i += 8) {
            const __m256 gv = _mm256_loadu_ps(g + i);
            const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv));
            const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.f), e));
            _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
        }
        for (; i < I; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * u[i];
    }
}

// gelu_tanh(g) * u, Gemma's gating: 0.5 g (1 + tanh(c (g + 0.044715 g^3))) = g * sigmoid(2 c (g + 0.044715 g^3)),
// c = sqrt(2 / pi): silu_mul's sigmoid at another argument.
void gelu_tanh_mul(const float* gate_up, float* out, int N, int I) {
    const float c2 = 2.f * 0.7978845608028654f, c3 = 0.044715f;
    for (int n = 0; n < N; ++n) {
        const float* g = gate_up + static_cast<int64_t>(n) * 2 * I;
        const float* u = g + I;
        float* o = out + static_cast<int64_t>(n) * I;
        int i = 0;
        for (; i + 8 <= I; i += 8) {
            const __m256 gv = _mm256_loadu_ps(g + i);
            const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(gv, gv), gv);
            const __m256 arg = _mm256_mul_ps(_mm256_set1_ps(c2), _mm256_fmadd_ps(_mm256_set1_ps(c3), g3, gv));
            const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), arg));
            const __m256 gelu = _mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.f), e));
            _mm256_storeu_ps(o + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(u + i)));
        }
        for (; i < I; ++i) o[i] = g[i] / (1.f + std::exp(-c2 * (g[i] + c3 * g[i] * g[i] * g[i]))) * u[i];
    }
}

// linear_q: the quantized projection with float32 scales and mins (linear_quant above); linear_q_h: with half ones.
void linear_q(const float* x, const uint8_t* wq, const float* scale, const float* minv, const float* bias, float* y,
              int B, int K, int N, int group, int bits, int threads) {
    linear_quant<float>(x, wq, scale, minv, bias, y, B, K, N, group, bits, threads);
}

void linear_q_h(const float* x, const uint8_t* wq, const uint16_t* scale, const uint16_t* minv, const float* bias,
                float* y, int B, int K, int N, int group, int bits, int threads) {
    linear_quant<uint16_t>(x, wq, scale, minv, bias, y, B, K, N, group, bits, threads);
}

// linear_q_amx(_h): the same on AMX tiles in bf16 (linear_quant_amx above), for B >= 16 and K a multiple of 32;
// only after amx_ready() returned 1 (the AVX-512 build on a CPU with AMX-BF16 and AVX512_BF16, tiles permitted).
int amx_ready() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    static const int ok = amx_permitted();
    return ok;
#else
    return 0;
#endif
}

void linear_q_amx(const float* x, const uint8_t* wq, const float* scale, const float* minv, const float* bias,
                  float* y, int B, int K, int N, int group, int bits, int threads) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    linear_quant_amx<float>(x, wq, scale, minv, bias, y, B, K, N, group, bits, threads);
#endif
}

void linear_q_amx_h(const float* x, const uint8_t* wq, const uint16_t* scale, const uint16_t* minv,
                    const float* bias, float* y, int B, int K, int N, int group, int bits, int threads) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    linear_quant_amx<uint16_t>(x, wq, scale, minv, bias, y, B, K, N, group, bits, threads);
#endif
}

// ---- KV pages in bf16 (--kv-cache-dtype bf16): the same kernels as decode_attention and rope_store, the pages'
// elements uint16_t bf16 bits, widened in registers as they are read and rounded as they are written.

void decode_attention_bf16(const float* q, const uint16_t* k_pool, const uint16_t* v_pool, const int32_t* table,
                           int W, const int32_t* lens, const int32_t* starts, float* out, int B, int H, int KV, int D,
                           int page, float scale, int threads) {
    decode_pages(q, k_pool, v_pool, table, W, lens, starts, out, B, H, KV, D, page, scale, threads);
}

void rope_store_bf16(const float* qkv, const float* cos, const float* sin, const int64_t* slots, float* q_out,
                     uint16_t* k_pool, uint16_t* v_pool, int N, int H, int KV, int D, const float* wq,
                     const float* wk, float eps) {
    rope_rows(qkv, cos, sin, slots, q_out, k_pool, v_pool, N, H, KV, D, wq, wk, eps);
}

// ---- a decode step's layers in one call (decode_layers): the same kernels as the runner calls one by one from
// Python, in the same order with the same arguments, so the result is bit-identical; what it saves is the Python
// and ctypes between them (about 9 calls a layer, 6-7 ms of a SmolLM2 step's 23 on the 2-core Xeon).

// One projection: kind 0 bf16 weights (linear_bf16), 1 quantized with float32 scales (linear_q), 2 with half
// scales (linear_q_h); w [n, k] (bf16) or the packed rows; k the (padded) input width.
struct StepProj {
    int32_t kind, n, k, group, bits, pad;
    const void* w;
    const void* scale;
    const void* minv;
    const float* bias;
};

// A layer: its four projections, the norm before the MLP and the one after it (the next layer's input norm, the
// model's final norm after the last), its KV pools ([pages, page, KV, D], float32 or bf16), the per-head q / k
// norms of Qwen3 and Gemma 3 (or null), Gemma 3's norms of the attention's and the MLP's outputs before their
// residual adds (or null), and which of the step's rotary tables and row sets (StepRows) it takes: Gemma 3's
// sliding layers have their own RoPE base and, with a window, their own pool.
struct StepLayer {
    StepProj qkv, o, gate_up, down;
    const float* norm_mid;
    const float* norm_next;
    void* k_pool;
    void* v_pool;
    const float* q_norm;
    const float* k_norm;
    const float* norm_attn_out;
    const float* norm_mlp_out;
    float qk_eps;
    int32_t rope, rows, pad;
};

// A step's rows in one pool: where each writes its key and value (slots [B]), the pages it reads (table [B, W]),
// how many positions (lens [B]) from which one (starts [B], a sliding window's; or null); the pool's page size.
struct StepRows {
    const int64_t* slots;
    const int32_t* table;
    const int32_t* lens;
    const int32_t* starts;
    int32_t W, page;
};

void step_proj(const StepProj& p, const float* x, float* y, int B, int threads) {
    if (p.kind == 0)
        linear_bf16(x, static_cast<const uint16_t*>(p.w), p.bias, y, B, p.k, p.n, threads);
    else if (p.kind == 1)
        linear_q(x, static_cast<const uint8_t*>(p.w), static_cast<const float*>(p.scale),
                 static_cast<const float*>(p.minv), p.bias, y, B, p.k, p.n, p.group, p.bits, threads);
    else
        linear_q_h(x, static_cast<const uint8_t*>(p.w), static_cast<const uint16_t*>(p.scale),
                   static_cast<const uint16_t*>(p.minv), p.bias, y, B, p.k, p.n, p.group, p.bits, threads);
}

// h [B, hidden] the embeddings, changed in place into the last layer's residual; out [B, hidden] the final norm's
// output. Every row decodes one token: cos, sin [2][B, D] the rotary tables (a layer's `rope`), rows [2] the row
// sets (a layer's `rows`). first_norm: the first layer's input norm. q_scale: q's factor after RoPE (Gemma 3's
// query_pre_attn_scalar against head_dim; 1: none). kv_bf16: the pools hold bf16. gelu: Gemma's gelu_tanh gating,
// else SiLU's.
void decode_layers(const StepLayer* layers, int n_layers, const float* first_norm, float* h, float* out,
                   const float* const* cos, const float* const* sin, const StepRows* rows, int B, int H, int KV, int D,
                   int hidden, int inter, float scale, float q_scale, float eps, int kv_bf16, int gelu, int threads) {
    std::vector<float> qkv(static_cast<size_t>(B) * (H + 2 * KV) * D), q(static_cast<size_t>(B) * H * D),
        att(static_cast<size_t>(B) * H * D), proj(static_cast<size_t>(B) * hidden),
        gate_up(static_cast<size_t>(B) * 2 * inter), gated(static_cast<size_t>(B) * inter);
    add_rmsnorm(h, nullptr, first_norm, out, B, hidden, eps);
    for (int li = 0; li < n_layers; ++li) {
        const StepLayer& L = layers[li];
        const StepRows& R = rows[L.rows];
        const float *c = cos[L.rope], *s = sin[L.rope];
        step_proj(L.qkv, out, qkv.data(), B, threads);
        if (kv_bf16)
            rope_store_bf16(qkv.data(), c, s, R.slots, q.data(), static_cast<uint16_t*>(L.k_pool),
                            static_cast<uint16_t*>(L.v_pool), B, H, KV, D, L.q_norm, L.k_norm, L.qk_eps);
        else
            rope_store(qkv.data(), c, s, R.slots, q.data(), static_cast<float*>(L.k_pool),
                       static_cast<float*>(L.v_pool), B, H, KV, D, L.q_norm, L.k_norm, L.qk_eps);
        if (q_scale != 1.f)  // as the loop's `q * q_scale` in float32
            for (float& x : q) x *= q_scale;
        if (kv_bf16)
            decode_attention_bf16(q.data(), static_cast<const uint16_t*>(L.k_pool),
                                  static_cast<const uint16_t*>(L.v_pool), R.table, R.W, R.lens, R.starts, att.data(),
                                  B, H, KV, D, R.page, scale, threads);
        else
            decode_attention(q.data(), static_cast<const float*>(L.k_pool), static_cast<const float*>(L.v_pool),
                             R.table, R.W, R.lens, R.starts, att.data(), B, H, KV, D, R.page, scale, threads);
        step_proj(L.o, att.data(), proj.data(), B, threads);
        if (L.norm_attn_out) add_rmsnorm(proj.data(), nullptr, L.norm_attn_out, proj.data(), B, hidden, eps);
        add_rmsnorm(h, proj.data(), L.norm_mid, out, B, hidden, eps);
        step_proj(L.gate_up, out, gate_up.data(), B, threads);
        if (gelu)
            gelu_tanh_mul(gate_up.data(), gated.data(), B, inter);
        else
            silu_mul(gate_up.data(), gated.data(), B, inter);
        step_proj(L.down, gated.data(), proj.data(), B, threads);
        if (L.norm_mlp_out) add_rmsnorm(proj.data(), nullptr, L.norm_mlp_out, proj.data(), B, hidden, eps);
        add_rmsnorm(h, proj.data(), L.norm_next, out, B, hidden, eps);
    }
}

}  // extern "C"
