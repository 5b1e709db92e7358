// Would int8 inputs make `int4` batches faster on AMX? A probe, not a kernel of the engine: int4 weights in the
// engine's layout (16 bytes a block of 32, weight j in byte j's low nibble and j + 16 in its high one; a half scale
// and min per 32) times inputs rounded to int8 per 32 (the variant bench/w4a8_quality.py found at 97% top-1), three
// ways, against the engine's linear_q_amx (bf16 tiles) on the same weights and a float64 reference:
//   - amx_k32: `tdpbusd` on a 16-row strip, one product per group of 32 (its 16 x 16 int32 sums stored and scaled by
//     the group's weight scale and the inputs' scale into float32 accumulators, the mins as scale x input sums);
//   - amx_k32_3: the same with the strip unpacked once and three products in flight;
//   - vnni: AVX512-VNNI `vpdpbusd` without tiles (4 codes broadcast against 4 inputs of 16 rows).
// Build and run (2 threads; AMX-INT8, AVX512-VNNI and F16C needed):
//   g++ -O3 -fopenmp -std=c++17 -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl
//       bench/w4a8_probe.cpp -o /tmp/w4a8_probe && /tmp/w4a8_probe 9728 896 16 50
#include "../engine/core/cpu_kernels.cpp"
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#define AMX8 __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,f16c")))

struct alignas(64) Cfg {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// The inputs as the integer paths take them: x [B, K] rounded to int8 per 32 (symmetric, max |x| / 127), laid out
// for `tdpbusd` / `vpdpbusd` (per group g and block j of 16 rows: [k / 4][row * 4 + k % 4], 512 bytes), with each
// group's input scales (sx) and scaled sums (the mins' term: the int8 values' sum times sx) as vectors over the
// block's 16 rows.
struct Inputs {
    int G, BB;
    std::vector<int8_t> xb;
    std::vector<float> sx, xs;
    const int8_t* tile(int g, int j) const { return xb.data() + (static_cast<int64_t>(g) * BB + j) * 512; }
    __m512 scales(int g, int j) const { return _mm512_loadu_ps(&sx[(static_cast<size_t>(g) * BB + j) * 16]); }
    __m512 sums(int g, int j) const { return _mm512_loadu_ps(&xs[(static_cast<size_t>(g) * BB + j) * 16]); }
};

AMX8 Inputs prepare(const float* x, int B, int K) {
    Inputs in{K / 32, (B + 15) / 16, {}, {}, {}};
    in.xb.assign(static_cast<size_t>(in.G) * in.BB * 512, 0);
    in.sx.assign(static_cast<size_t>(in.G) * in.BB * 16, 0.f);
    in.xs.assign(in.sx.size(), 0.f);
    for (int b = 0; b < B; ++b)
        for (int g = 0; g < in.G; ++g) {
            const float* v = x + static_cast<int64_t>(b) * K + g * 32;
            const __m512 a0 = _mm512_loadu_ps(v), a1 = _mm512_loadu_ps(v + 16);
            const float s = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a0), _mm512_abs_ps(a1))) / 127.f;
            const __m512 inv = _mm512_set1_ps(s > 0 ? 1.f / s : 0.f);
            alignas(64) int32_t qi[32];
            _mm512_store_si512(qi, _mm512_cvtps_epi32(_mm512_mul_ps(a0, inv)));
            _mm512_store_si512(qi + 16, _mm512_cvtps_epi32(_mm512_mul_ps(a1, inv)));
            int sum = 0;
            int8_t* dst = in.xb.data() + (static_cast<int64_t>(g) * in.BB + b / 16) * 512;
            for (int k = 0; k < 32; ++k) {
                dst[(k / 4) * 64 + (b % 16) * 4 + k % 4] = static_cast<int8_t>(qi[k]);
                sum += qi[k];
            }
            const size_t at = (static_cast<size_t>(g) * in.BB + b / 16) * 16 + b % 16;
            in.sx[at] = s;
            in.xs[at] = static_cast<float>(sum) * s;
        }
    return in;
}

AMX8 void amx_k32(const float* x, const uint8_t* wq, const uint16_t* sc, const uint16_t* mn, float* y, int B, int K, int N,
             int threads) {
    const Inputs in = prepare(x, B, K);
    const int G = in.G, BB = in.BB;
    const int strips = N / 16;
#pragma omp parallel num_threads(threads)
    {
        Cfg cfg;
        cfg.colsb[0] = 32; cfg.rows[0] = 16;  // A: 16 weight rows x 32 codes
        cfg.colsb[1] = 64; cfg.rows[1] = 8;   // B: 8 x (16 cols x 4)
        cfg.colsb[2] = 64; cfg.rows[2] = 16;  // C
        cfg.colsb[3] = 64; cfg.rows[3] = 8;
        cfg.colsb[4] = 64; cfg.rows[4] = 16;
        _tile_loadconfig(&cfg);
        alignas(64) uint8_t a[16 * 32];
        alignas(64) int32_t c[2][256];
        alignas(64) float acc[2][16][16];
#pragma omp for schedule(guided)
        for (int s = 0; s < strips; ++s) {
            const int n0 = s * 16;
            for (int j = 0; j < BB; ++j)
                for (int r = 0; r < 16; ++r) _mm512_store_ps(acc[j][r], _mm512_setzero_ps());
            for (int g = 0; g < G; ++g) {
                for (int r = 0; r < 16; ++r) {  // unpack 16 bytes -> 32 codes
                    const __m128i p = _mm_loadu_si128((const __m128i*)(wq + (int64_t)(n0 + r) * (K / 2) + g * 16));
                    const __m128i lo = _mm_and_si128(p, _mm_set1_epi8(15));
                    const __m128i hi = _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(15));
                    _mm_store_si128((__m128i*)(a + r * 32), lo);
                    _mm_store_si128((__m128i*)(a + r * 32 + 16), hi);
                }
                _tile_loadd(0, a, 32);
                _tile_loadd(1, in.tile(g, 0), 64);
                _tile_zero(2);
                _tile_dpbusd(2, 0, 1);
                _tile_stored(2, c[0], 64);
                if (BB > 1) {
                    _tile_loadd(3, in.tile(g, 1), 64);
                    _tile_zero(4);
                    _tile_dpbusd(4, 0, 3);
                    _tile_stored(4, c[1], 64);
                }
                for (int j = 0; j < BB; ++j) {
                    const __m512 sxv = in.scales(g, j);
                    const __m512 xsv = in.sums(g, j);
                    for (int r = 0; r < 16; ++r) {
                        const int64_t gi = (int64_t)(n0 + r) * G + g;
                        const float s1 = _cvtsh_ss(sc[gi]), m1 = _cvtsh_ss(mn[gi]);
                        const __m512 fp = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[j] + r * 16)), sxv);
                        const __m512 t = _mm512_fmadd_ps(_mm512_set1_ps(s1), fp, _mm512_load_ps(acc[j][r]));
                        _mm512_store_ps(acc[j][r], _mm512_fmadd_ps(_mm512_set1_ps(m1), xsv, t));
                    }
                }
            }
            for (int j = 0; j < BB; ++j)
                for (int r = 0; r < 16; ++r)
                    for (int cix = 0; cix < 16; ++cix) {
                        const int b = j * 16 + cix;
                        if (b < B) y[(int64_t)b * N + n0 + r] = acc[j][r][cix];
                    }
        }
        _tile_release();
    }
}


// amx_k32_3: the strip unpacked once, three groups in flight (three C tiles), the mins as a separate term.
AMX8 void amx_k32_3(const float* x, const uint8_t* wq, const uint16_t* sc, const uint16_t* mn, float* y, int B, int K,
                 int N, int threads) {
    const Inputs in = prepare(x, B, K);
    const int G = in.G, BB = in.BB;
    const int strips = N / 16;
#pragma omp parallel num_threads(threads)
    {
        Cfg cfg;
        cfg.colsb[0] = 32; cfg.rows[0] = 16;
        cfg.colsb[1] = 64; cfg.rows[1] = 8;
        cfg.colsb[2] = 64; cfg.rows[2] = 16;
        cfg.colsb[3] = 32; cfg.rows[3] = 16;
        cfg.colsb[4] = 64; cfg.rows[4] = 8;
        cfg.colsb[5] = 64; cfg.rows[5] = 16;
        cfg.colsb[6] = 64; cfg.rows[6] = 16;
        _tile_loadconfig(&cfg);
        std::vector<uint8_t> a((size_t)16 * K + 64);
        alignas(64) int32_t c[3][256];
        std::vector<float> sf((size_t)16 * G), mf((size_t)16 * G);
        const __m512i idx01 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11), idx23 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
#pragma omp for schedule(guided)
        for (int s = 0; s < strips; ++s) {
            const int n0 = s * 16;
            for (int r = 0; r < 16; ++r) {
                const uint8_t* src = wq + (int64_t)(n0 + r) * (K / 2);
                uint8_t* dst = a.data() + (size_t)r * K;
                int k2 = 0;
                for (; k2 + 64 <= K / 2; k2 += 64) {  // 4 groups
                    const __m512i p = _mm512_loadu_si512(src + k2);
                    const __m512i lo = _mm512_and_si512(p, _mm512_set1_epi8(15));
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), _mm512_set1_epi8(15));
                    _mm512_storeu_si512(dst + 2 * k2, _mm512_permutex2var_epi64(lo, idx01, hi));
                    _mm512_storeu_si512(dst + 2 * k2 + 64, _mm512_permutex2var_epi64(lo, idx23, hi));
                }
                for (; k2 < K / 2; k2 += 16) {
                    const __m128i p = _mm_loadu_si128((const __m128i*)(src + k2));
                    _mm_storeu_si128((__m128i*)(dst + 2 * k2), _mm_and_si128(p, _mm_set1_epi8(15)));
                    _mm_storeu_si128((__m128i*)(dst + 2 * k2 + 16), _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(15)));
                }
                for (int g = 0; g < G; ++g) sf[r * G + g] = _cvtsh_ss(sc[(int64_t)(n0 + r) * G + g]), mf[r * G + g] = _cvtsh_ss(mn[(int64_t)(n0 + r) * G + g]);
            }
            for (int j = 0; j < BB; ++j) {
                __m512 acc[16];
                for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
                for (int g = 0; g < G; g += 3) {  // three groups in flight: products overlap the stores
                    _tile_loadd(0, a.data() + g * 32, K);
                    _tile_loadd(1, in.tile(g, j), 64);
                    _tile_zero(2);
                    _tile_dpbusd(2, 0, 1);
                    if (g + 1 < G) {
                        _tile_loadd(3, a.data() + (g + 1) * 32, K);
                        _tile_loadd(4, in.tile(g + 1, j), 64);
                        _tile_zero(5);
                        _tile_dpbusd(5, 3, 4);
                    }
                    if (g + 2 < G) {
                        _tile_loadd(0, a.data() + (g + 2) * 32, K);
                        _tile_loadd(1, in.tile(g + 2, j), 64);
                        _tile_zero(6);
                        _tile_dpbusd(6, 0, 1);
                    }
                    _tile_stored(2, c[0], 64);
                    if (g + 1 < G) _tile_stored(5, c[1], 64);
                    if (g + 2 < G) _tile_stored(6, c[2], 64);
                    for (int h = 0; h < 3 && g + h < G; ++h) {
                        const int gg = g + h;
                        const __m512 sxv = in.scales(gg, j);
                        const __m512 xsv = in.sums(gg, j);
#pragma GCC unroll 16
                        for (int r = 0; r < 16; ++r) {
                            const __m512 fp = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[h] + r * 16)), sxv);
                            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(sf[r * G + gg]), fp, acc[r]);
                            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(mf[r * G + gg]), xsv, acc[r]);
                        }
                    }
                }
                alignas(64) float out[16][16];
                for (int r = 0; r < 16; ++r) _mm512_store_ps(out[r], acc[r]);
                for (int r = 0; r < 16; ++r)
                    for (int cix = 0; cix < 16; ++cix) {
                        const int b = j * 16 + cix;
                        if (b < B) y[(int64_t)b * N + n0 + r] = out[r][cix];
                    }
            }
        }
        _tile_release();
    }
}

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c")))
// vnni: AVX512-VNNI, no tiles: per 16-column block, per row: 8 vpdpbusd a group (4 codes broadcast x 4 inputs of 16 b)
VNNI void vnni(const float* x, const uint8_t* wq, const uint16_t* sc, const uint16_t* mn, float* y, int B, int K,
                 int N, int threads) {
    const Inputs in = prepare(x, B, K);
    const int G = in.G, BB = in.BB;
    const int R = 4;
    const int tiles = N / R;
#pragma omp parallel num_threads(threads)
    {
        alignas(64) uint8_t a[R][32];
#pragma omp for schedule(guided)
        for (int t = 0; t < tiles; ++t) {
            const int n0 = t * R;
            for (int j = 0; j < BB; ++j) {
                __m512 acc[R];
                for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
                for (int g = 0; g < G; ++g) {
                    const int8_t* xg = in.tile(g, j);
                    __m512i ci[R];
#pragma GCC unroll 8
                    for (int r = 0; r < R; ++r) {
                        const __m128i p = _mm_loadu_si128((const __m128i*)(wq + (int64_t)(n0 + r) * (K / 2) + g * 16));
                        _mm_store_si128((__m128i*)a[r], _mm_and_si128(p, _mm_set1_epi8(15)));
                        _mm_store_si128((__m128i*)(a[r] + 16), _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(15)));
                        ci[r] = _mm512_setzero_si512();
                    }
#pragma GCC unroll 8
                    for (int kk = 0; kk < 8; ++kk) {
                        const __m512i xv = _mm512_loadu_si512(xg + kk * 64);
#pragma GCC unroll 8
                        for (int r = 0; r < R; ++r)
                            ci[r] = _mm512_dpbusd_epi32(ci[r], _mm512_set1_epi32(*(const int*)(a[r] + kk * 4)), xv);
                    }
                    const __m512 sxv = in.scales(g, j);
                    const __m512 xsv = in.sums(g, j);
#pragma GCC unroll 8
                    for (int r = 0; r < R; ++r) {
                        const int64_t gi = (int64_t)(n0 + r) * G + g;
                        const __m512 fp = _mm512_mul_ps(_mm512_cvtepi32_ps(ci[r]), sxv);
                        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(sc[gi])), fp, acc[r]);
                        acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(_cvtsh_ss(mn[gi])), xsv, acc[r]);
                    }
                }
                alignas(64) float out[R][16];
                for (int r = 0; r < R; ++r) _mm512_store_ps(out[r], acc[r]);
                for (int r = 0; r < R; ++r)
                    for (int cix = 0; cix < 16; ++cix) {
                        const int b = j * 16 + cix;
                        if (b < B) y[(int64_t)b * N + n0 + r] = out[r][cix];
                    }
            }
        }
    }
}

using Fn = void (*)(const float*, const uint8_t*, const uint16_t*, const uint16_t*, float*, int, int, int, int);

int main(int argc, char** argv) {
    if (argc < 5) {
        printf("usage: w4a8_probe N K B REPS (K a multiple of 128, N of 16)\n");
        return 2;
    }
    const int N = atoi(argv[1]), K = atoi(argv[2]), B = atoi(argv[3]), reps = atoi(argv[4]);
    const int G = K / 32;
    if (!amx_permitted()) {
        printf("no AMX tiles here\n");
        return 1;
    }
    std::mt19937 rng(1);
    std::vector<uint8_t> wq((size_t)N * K / 2);
    std::vector<uint16_t> sc((size_t)N * G), mn((size_t)N * G);
    for (auto& v : wq) v = rng();
    for (auto& v : sc) v = _cvtss_sh(0.001f + (rng() % 100) * 1e-5f, 0);
    for (auto& v : mn) v = _cvtss_sh(-0.01f - (rng() % 100) * 1e-4f, 0);
    std::vector<float> x((size_t)B * K), y((size_t)B * N), ref((size_t)B * N);
    for (auto& v : x) v = std::normal_distribution<float>(0, 1)(rng);
    for (int n = 0; n < N; ++n)  // the reference: float weights (as decoded) times float inputs, in double
        for (int b = 0; b < B; ++b) {
            double s = 0;
            for (int k = 0; k < K; ++k) {
                const uint8_t byte = wq[(size_t)n * K / 2 + (k / 32) * 16 + (k % 16)];
                const int q = (k % 32) < 16 ? byte & 15 : byte >> 4;
                s += (double)(_cvtsh_ss(sc[n * G + k / 32]) * q + _cvtsh_ss(mn[n * G + k / 32])) * x[(size_t)b * K + k];
            }
            ref[(size_t)b * N + n] = (float)s;
        }
    auto engine_bf16 = [](const float* x_, const uint8_t* w_, const uint16_t* s_, const uint16_t* m_, float* y_, int B_,
                          int K_, int N_, int t_) {
        linear_q_amx_h(x_, w_, s_, m_, nullptr, y_, B_, K_, N_, 32, 4, t_);
    };
    const std::pair<const char*, Fn> paths[] = {
        {"engine linear_q_amx (bf16 tiles)", engine_bf16},
        {"int8 inputs, AMX K=32 a product", amx_k32},
        {"int8 inputs, AMX K=32, 3 in flight", amx_k32_3},
        {"int8 inputs, AVX512-VNNI", vnni},
    };
    for (const auto& [name, fn] : paths) {
        fn(x.data(), wq.data(), sc.data(), mn.data(), y.data(), B, K, N, 2);
        double e = 0, r = 0;
        for (size_t i = 0; i < ref.size(); ++i) e += (y[i] - ref[i]) * (y[i] - ref[i]), r += ref[i] * ref[i];
        double best = 1e9;
        for (int round = 0; round < 3; ++round) {
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < reps; ++i) fn(x.data(), wq.data(), sc.data(), mn.data(), y.data(), B, K, N, 2);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
        }
        printf("%-40s N %d K %d B %d: %.3f ms a call (best of 3 x %d), relative error %.2e\n", name, N, K, B,
               best * 1e3, reps, sqrt(e / r));
    }
}
