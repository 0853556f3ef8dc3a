/* How close the AVX2 matmul tiles (csrc/hmg_kernels.h) run to what this
 * CPU can issue, one core, weights and activations in cache. Built and run
 * by benches/tile_rate.sh with the flags build.rs gives the engines; pin it
 * to a core (the script does).
 *
 * Prints:
 * - the issue rate of vpmaddubsw (the multiply every AVX2 tile is built
 *   on: 32 multiply-adds of bytes each) and of vpaddw (a plain vector op),
 *   eight independent chains each, in instructions per ns;
 * - for e5's three matrix shapes (384 -> 384, 384 -> 1536, 1536 -> 384)
 *   and 16 / 64 tokens: the 4-bit tile (e5's weights) and the 8-bit tile
 *   (MiniLM's) in GMAC/s, the best of many rounds, and that rate as a share
 *   of 32 x the vpmaddubsw rate (the multiplier's peak).
 *
 * No tile reaches that peak; what bounds each is its instruction mix,
 * counted from the tiles' code (csrc/hmg_kernels.h) in vector slots per
 * vpmaddubsw (32 multiply-adds):
 * - 4-bit: the vpmaddubsw and the vpaddw that sums it in 16 bits (2), its
 *   share of unpacking the nibbles (6 per 16, 0.375) and of each block's
 *   widening, zero point and float scaling (12 per token and block of 16,
 *   0.75), and half an activation broadcast (vpbroadcastd from memory);
 * - 8-bit: the vpmaddubsw, the vpsignb that moves the weight's sign to the
 *   activation, the vpmaddwd that widens the pair and its vpaddd (4; two of
 *   them multiplies), its share of the weights' sign split (4 per 8, 0.5)
 *   and of the float scaling (6.5 per 16, 0.4), and half a broadcast.
 * The program measures what a slot and a broadcast cost (a vpaddw issue
 * rate; vpaddw with and without broadcasts beside it), so each tile's
 * bound, min(multiplies, slots), and the share of it the tile reaches are
 * printed for the CPU it runs on.
 *
 * The tiles' results are not checked here (the engines' tests do that);
 * the weights and activations are random bytes.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0 */

#include "../csrc/hmg_kernels.h"
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Eight independent chains of one vector instruction, as asm text. */
#define INSN8(INSN)                                                                                  \
    INSN " %%ymm8,%%ymm0,%%ymm0\n\t" INSN " %%ymm8,%%ymm1,%%ymm1\n\t" INSN " %%ymm8,%%ymm2,%%ymm2\n\t" \
    INSN " %%ymm8,%%ymm3,%%ymm3\n\t" INSN " %%ymm8,%%ymm4,%%ymm4\n\t" INSN " %%ymm8,%%ymm5,%%ymm5\n\t" \
    INSN " %%ymm8,%%ymm6,%%ymm6\n\t" INSN " %%ymm8,%%ymm7,%%ymm7\n\t"
/* Eight broadcasts from memory (%1), into registers no chain reads. */
#define BROADCAST8                                                                                   \
    "vpbroadcastd (%1),%%ymm9\n\tvpbroadcastd 4(%1),%%ymm10\n\tvpbroadcastd 8(%1),%%ymm11\n\t"           \
    "vpbroadcastd 12(%1),%%ymm12\n\tvpbroadcastd 16(%1),%%ymm13\n\tvpbroadcastd 20(%1),%%ymm14\n\t"      \
    "vpbroadcastd 24(%1),%%ymm15\n\tvpbroadcastd 28(%1),%%ymm9\n\t"
/* NAME(n): the best of nine runs of n iterations of BODY, in ns per
 * iteration. The loop is written in asm, 64-byte aligned (unaligned, the
 * vpaddw rate swung 9-12.6/ns between builds), with nothing else but the
 * count, so the compiler adds no register moves. */
#define NS_PER_ITERATION(NAME, BODY)                                                                  \
    __attribute__((target("avx2"))) static double NAME(long n) {                                    \
        static int32_t from[16];                                                                     \
        double best = 1e30;                                                                          \
        for (int round = 0; round < 9; round++) {                                                    \
            long left = n;                                                                           \
            double t0 = now();                                                                       \
            __asm__ volatile("vpcmpeqb %%ymm8,%%ymm8,%%ymm8\n\t"                                      \
                             ".p2align 6\n1:\n\t" BODY "dec %0\n\tjnz 1b\n\t"                          \
                             : "+r"(left)                                                            \
                             : "r"(from)                                                             \
                             : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
                               "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory"); \
            double t = now() - t0;                                                                   \
            if (t < best) best = t;                                                                  \
        }                                                                                            \
        __asm__ volatile("vzeroupper" ::: "xmm0");                                                   \
        return best / (double)n * 1e9;                                                               \
    }
NS_PER_ITERATION(maddubs16_ns, INSN8("vpmaddubsw") INSN8("vpmaddubsw"))
NS_PER_ITERATION(paddw16_ns, INSN8("vpaddw") INSN8("vpaddw"))
NS_PER_ITERATION(paddw16_broadcast8_ns, INSN8("vpaddw") BROADCAST8 INSN8("vpaddw"))

/* The vector slots one vpbroadcastd from memory takes: the time of 16
 * vpaddw with 8 broadcasts among them, beyond the 16 vpaddw alone, in
 * vpaddw issues. */
static double broadcast_slots(long n, double paddw_per_ns) {
    double extra = paddw16_broadcast8_ns(n) - 16.0 / paddw_per_ns;
    return extra > 0 ? extra * paddw_per_ns / 8.0 : 0.0;
}

/* One [nout][nin] matmul over L tokens the way hmg_matmul_packed's AVX2
 * path runs it on one core: 32-output pairs, each 16-output half over the
 * tokens in fours. */
static void matmul(int q4, const uint8_t *q, const float *d, int nout, int nin, const int8_t *aq, const float *ad,
                   const int32_t *as, float *Y, int L) {
    static const hmg_tile_avx2_fn tiles[2][5] = {
        {NULL, hmg_tile1_avx2, hmg_tile2_avx2, hmg_tile3_avx2, hmg_tile4_avx2},
        {NULL, hmg_tile1_avx2_q4, hmg_tile2_avx2_q4, hmg_tile3_avx2_q4, hmg_tile4_avx2_q4}};
    int nb = nin / HMG_QK, bytes = q4 ? 256 : 512, zero = q4 ? 8 : 128;
    for (int pair = 0; pair < nout / 32; pair++)
        for (int half = 0; half < 2; half++) {
            const uint8_t *qh = q + (size_t)(2 * pair + half) * nb * bytes;
            const float *dh = d + (size_t)(2 * pair + half) * nb * 16;
            float *yh = Y + pair * 32 + 16 * half;
            for (int u = 0, n; (n = L - u < 4 ? L - u : 4) > 0; u += n)
                tiles[q4][n](qh, dh, nb, aq + (size_t)u * nin, ad + (size_t)u * nb, as + (size_t)u * nb, nin, NULL,
                             yh + (size_t)u * nout, nout, zero);
        }
}

/* GMAC/s of the best of `rounds` matmuls. */
static double tile_rate(int q4, int nout, int nin, int L, int rounds) {
    int nb = nin / HMG_QK;
    size_t wbytes = (size_t)nout * nin / (q4 ? 2 : 1);
    uint8_t *q = (uint8_t *)hmg_alloc64(wbytes);
    float *d = (float *)malloc(sizeof(float) * (size_t)nout * nb);
    int8_t *aq = (int8_t *)hmg_alloc64((size_t)L * nin);
    float *ad = (float *)malloc(sizeof(float) * (size_t)L * nb);
    int32_t *as = (int32_t *)malloc(sizeof(int32_t) * (size_t)L * nb);
    float *Y = (float *)hmg_alloc64(sizeof(float) * (size_t)L * nout);
    if (!q || !d || !aq || !ad || !as || !Y) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    unsigned seed = 12345;
    for (size_t i = 0; i < wbytes; i++) q[i] = (uint8_t)(rand_r(&seed) >> 7);
    for (size_t i = 0; i < (size_t)nout * nb; i++) d[i] = 0.01f;
    for (size_t i = 0; i < (size_t)L * nin; i++) aq[i] = (int8_t)(rand_r(&seed) % 255 - 127);
    for (int t = 0; t < L; t++)
        for (int b = 0; b < nb; b++) {
            int s = 0;
            for (int k = 0; k < HMG_QK; k++) s += aq[(size_t)t * nin + b * HMG_QK + k];
            ad[t * nb + b] = 0.02f;
            as[t * nb + b] = s;
        }
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        matmul(q4, q, d, nout, nin, aq, ad, as, Y, L);
        double t = now() - t0;
        if (t < best) best = t;
    }
    volatile float sink = Y[0];
    (void)sink;
    free(q); free(d); free(aq); free(ad); free(as); free(Y);
    return (double)nout * nin * L / best / 1e9;
}

int main(void) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("this CPU has no AVX2 + FMA: the AVX2 tiles do not run here\n");
        return 1;
    }
    double maddubs = 16.0 / maddubs16_ns(25000000L), paddw = 16.0 / paddw16_ns(25000000L);
    double bcast = broadcast_slots(25000000L, paddw);
    double peak = 32.0 * maddubs;
    /* Bounds in GMAC/s: 32 multiply-adds per vpmaddubsw, at most as many
     * vpmaddubsw as the multiplier takes (the 8-bit tile's vpmaddwd
     * shares it) and as the slots allow for each one's mix. */
    double slots4 = 2.0 + 0.375 + 0.75 + 0.5 * bcast, slots8 = 4.0 + 0.5 + 0.4 + 0.5 * bcast;
    double bound4 = 32.0 * fmin(maddubs, paddw / slots4), bound8 = 32.0 * fmin(maddubs / 2.0, paddw / slots8);
    printf("issue rate, one core: vpmaddubsw %.2f/ns (multiplier peak %.0f GMAC/s), vpaddw %.2f/ns, "
           "a broadcast %.2f slots\n",
           maddubs, peak, paddw, bcast);
    printf("bounds from the instruction mix: 4-bit %.0f GMAC/s (%.0f%% of the peak), 8-bit %.0f GMAC/s (%.0f%%)\n",
           bound4, 100 * bound4 / peak, bound8, 100 * bound8 / peak);
    static const int shapes[3][2] = {{384, 384}, {1536, 384}, {384, 1536}};
    static const int tokens[2] = {16, 64};
    printf("%-18s %6s %24s %24s\n", "matrix (out x in)", "tokens", "4-bit (e5): of bound", "8-bit (MiniLM): of bound");
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 2; k++) {
            int nout = shapes[s][0], nin = shapes[s][1], L = tokens[k];
            int rounds = (int)(2e10 / ((double)nout * nin * L)) + 20;
            double r4 = tile_rate(1, nout, nin, L, rounds), r8 = tile_rate(0, nout, nin, L, rounds);
            char label[32];
            snprintf(label, sizeof label, "%d x %d", nout, nin);
            printf("%-18s %6d %11.1f GMAC/s %4.0f%% %11.1f GMAC/s %4.0f%%\n", label, L, r4, 100 * r4 / bound4, r8,
                   100 * r8 / bound8);
        }
    return 0;
}
