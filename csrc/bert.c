/* HMG's BERT encoder: a sentence-embedding model of the BERT family
 * (all-MiniLM-L6-v2 by default) on HMG's integer kernels
 * (csrc/hmg_kernels.h), the same engine that runs multilingual-e5-small.
 *
 * The caller (src/index/embed/bert.rs) tokenizes and hands over token ids;
 * this file runs the encoder and mean-pools. Weights come in as float32
 * (the model's safetensors, memory-mapped by the caller): each matrix is
 * quantized once at load, per 32-input block, to 8 bits (Q8_0, zero point
 * 128 in the packed layout), and activations to 8 bits per block before
 * each matmul (or, for batches on a CPU with AMX, both to bf16 tiles; see
 * hmg_kernels.h). The embeddings, layer norms and biases are read in place
 * from the caller's float32 tensors, which must outlive the model.
 *
 * Forward pass (post-LN BERT, as the model was trained): embeddings (word +
 * position + token type 0) -> LayerNorm; per layer: Q/K/V, attention within
 * each text, output projection, residual + LayerNorm, GELU feed-forward,
 * residual + LayerNorm; then the mean of each text's token states
 * (including [CLS] and [SEP], as sentence-transformers does without
 * padding), L2-normalized.
 *
 * All texts of a call run as one [T][H] activation matrix, so each weight
 * streams once per call; OpenMP spreads the matmuls over every core.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0 */

#include <stdio.h>

#include "hmg_kernels.h"

typedef struct {
    hmg_packed_t *q, *k, *v, *ao, *fi, *fo;
    const float *qb, *kb, *vb, *aob, *aln_w, *aln_b, *fib, *fob, *oln_w, *oln_b;
} hmg_bert_layer;

typedef struct hmg_bert {
    int H, NL, NH, FF, vocab, maxpos;
    float eps;
    const float *word, *pos, *type, *eln_w, *eln_b;
    hmg_bert_layer *layers;
} hmg_bert;

/* Chooses the kernel: 3 = AMX tiles for batches and AVX512-VNNI for the
 * rest, 1 = AVX512-VNNI, 2 = AVX2, 0 = plain C (a kernel the CPU lacks
 * falls back to the next), -1 = the best the CPU has (the default).
 * Returns the one in use. */
int hmg_bert_set_kernel(int kernel) { return hmg_kernel_set(kernel); }

/* 1 when batches run on AMX tiles (the kernel in use, decided from the CPU
 * at first use), else 0. */
int hmg_bert_batches_on_tiles(void) { return hmg_kernel_now() == 1 && __atomic_load_n(&hmg_amx, __ATOMIC_RELAXED); }

/* on = 1: this thread's next passes give each text one vector whatever
 * batch it is in (hmg_uniform); 0: the usual choice. */
void hmg_bert_uniform(int on) { hmg_uniform = on != 0; }

/* on = 1: this thread's passes take the plain schedules (hmg_unfused:
 * feed-forward unfused, keys transposed element by element; for the
 * tests that compare both). */
void hmg_bert_unfused(int on) { hmg_unfused = on != 0; }

/* W[nout][nin] float32 -> packed 8-bit, per (output, 32-input block):
 * the activations' quantizer (hmg_quantize: scale max |w| / 127, round to
 * nearest even), kept within +-127 so the AVX2 tile's 16-bit pair sums
 * cannot overflow, stored with zero point 128. */
static hmg_packed_t *pack_q8(const float *W, int nout, int nin) {
    int nb = nin / HMG_QK;
    hmg_packed_t *p = hmg_pack_new(nout, nin, 128);
    int8_t *q = (int8_t *)malloc((size_t)nout * nin);
    float *d = (float *)malloc(sizeof(float) * (size_t)nout * nb);
    int32_t *s = (int32_t *)malloc(sizeof(int32_t) * (size_t)nout * nb);
    if (!p || !q || !d || !s) { hmg_pack_free(p); free(q); free(d); free(s); return NULL; }
    hmg_quantize(W, nout, nin, q, d, s);
#pragma omp parallel for schedule(static)
    for (int o = 0; o < nout; o++)
        for (int b = 0; b < nb; b++) {
            const int8_t *w = q + (size_t)o * nin + (size_t)b * HMG_QK;
            uint8_t u[HMG_QK];
            for (int k = 0; k < HMG_QK; k++) u[k] = (uint8_t)((w[k] < -127 ? -127 : w[k]) + 128);
            hmg_pack_block(p, o, b, u, d[(size_t)o * nb + b]);
        }
    free(q); free(d); free(s);
    return p;
}

void hmg_bert_free(hmg_bert *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->NL; l++) {
            hmg_bert_layer *ly = &m->layers[l];
            hmg_pack_free(ly->q); hmg_pack_free(ly->k); hmg_pack_free(ly->v);
            hmg_pack_free(ly->ao); hmg_pack_free(ly->fi); hmg_pack_free(ly->fo);
        }
    free(m->layers);
    free(m);
}

/* Matrix i of a model (layer i / 6: query, key, value, attention output,
 * intermediate, output) as a pack slot. */
static hmg_packed_t **bert_matrix(hmg_bert *m, int i) {
    if (i < 0 || i >= 6 * m->NL) return NULL;
    hmg_bert_layer *ly = &m->layers[i / 6];
    hmg_packed_t **slots[6] = {&ly->q, &ly->k, &ly->v, &ly->ao, &ly->fi, &ly->fo};
    return slots[i % 6];
}

/* Builds a model from float32 tensors, in this order: word [vocab][H],
 * position [maxpos][H], token type [>=1][H], embedding LayerNorm weight
 * [H] and bias [H]; then per layer: query weight [H][H] and bias [H], key,
 * value, attention output (weight, bias each), attention LayerNorm
 * (weight, bias), intermediate weight [FF][H] and bias [FF], output weight
 * [H][FF] and bias [H], output LayerNorm (weight, bias): 5 + 16 * NL
 * pointers. With packed_w and packed_d, the six matrices of each layer
 * (in hmg_bert_matrix's order) are taken as they are, already packed
 * (a pack file the caller keeps mapped while the model lives: weights and
 * scales of the sizes hmg_bert_matrix reports, 64-byte aligned), instead
 * of quantized from the float weights, which are then not read. Returns
 * NULL when a shape is unsupported (H and FF must be multiples of 32 and H
 * of NH) or memory runs out. */
hmg_bert *hmg_bert_new(int H, int NL, int NH, int FF, int vocab, int maxpos, float eps, const float *const *t,
                       const uint8_t *const *packed_w, const float *const *packed_d) {
    if (H <= 0 || NL <= 0 || NH <= 0 || FF <= 0 || vocab <= 0 || maxpos <= 2 || H % 32 || FF % 32 || H % NH) return NULL;
    hmg_bert *m = (hmg_bert *)calloc(1, sizeof(hmg_bert));
    if (!m) return NULL;
    m->H = H; m->NL = NL; m->NH = NH; m->FF = FF; m->vocab = vocab; m->maxpos = maxpos; m->eps = eps;
    m->word = t[0]; m->pos = t[1]; m->type = t[2]; m->eln_w = t[3]; m->eln_b = t[4];
    m->layers = (hmg_bert_layer *)calloc((size_t)NL, sizeof(hmg_bert_layer));
    if (!m->layers) { free(m); return NULL; }
    int ok = 1;
    for (int l = 0; l < NL; l++) {
        const float *const *lt = t + 5 + 16 * l;
        hmg_bert_layer *ly = &m->layers[l];
        ly->qb = lt[1]; ly->kb = lt[3]; ly->vb = lt[5]; ly->aob = lt[7];
        ly->aln_w = lt[8]; ly->aln_b = lt[9];
        ly->fib = lt[11]; ly->fob = lt[13];
        ly->oln_w = lt[14]; ly->oln_b = lt[15];
        /* Matrix j's float weights, [nout][nin]: FF x H for the
         * intermediate, H x FF for the output, H x H for the rest. */
        static const int weight_at[6] = {0, 2, 4, 6, 10, 12};
        for (int j = 0; j < 6; j++) {
            int nout = j == 4 ? FF : H, nin = j == 5 ? FF : H;
            int i = 6 * l + j;
            *bert_matrix(m, i) = packed_w && packed_d ? hmg_pack_borrow(nout, nin, 128, packed_w[i], packed_d[i])
                                                      : pack_q8(lt[weight_at[j]], nout, nin);
        }
        ok = ok && ly->q && ly->k && ly->v && ly->ao && ly->fi && ly->fo;
    }
    if (!ok) { hmg_bert_free(m); return NULL; }
    return m;
}

/* Matrix i's shape, zero point and packed weights and scales (for a pack
 * file); -1 when there is no matrix i. */
int hmg_bert_matrix(hmg_bert *m, int i, int *nout, int *nin, int *zero, const uint8_t **w, const float **d) {
    hmg_packed_t **slot = bert_matrix(m, i);
    if (!slot || !*slot) return -1;
    hmg_pack_parts(*slot, nout, nin, zero, w, d);
    return 0;
}

int hmg_bert_dim(const hmg_bert *m) { return m->H; }
int hmg_bert_max_tokens(const hmg_bert *m) { return m->maxpos; }

/* Embeds n texts given as token ids (with [CLS] and [SEP], each text at most
 * hmg_bert_max_tokens long and at least 1 token): ids holds the texts one
 * after the other, lens[i] the length of text i. Writes n * H floats, each
 * text's L2-normalized mean token state. Returns 0, or -1 for bad input
 * (an id outside the vocabulary, a bad length) or when memory runs out. */
static int bert_forward_pool(hmg_bert *m, const int32_t *ids, const int32_t *lens, int n, const int32_t *pa, const int32_t *pb,
                             int npool, float *out);

int hmg_bert_embed(hmg_bert *m, const int32_t *ids, const int32_t *lens, int n, float *out) {
    if (n <= 0) return 0;
    int32_t *pa = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *pb = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    int rc = -1;
    if (pa && pb) {
        long t = 0;
        for (int i = 0; i < n; i++) {
            pa[i] = (int32_t)t;
            t += lens[i] > 0 ? lens[i] : 0;
            pb[i] = (int32_t)t;
        }
        rc = bert_forward_pool(m, ids, lens, n, pa, pb, n, out);
    }
    free(pa); free(pb);
    return rc;
}

/* Late chunking: one text of len tokens (with [CLS] and [SEP]) and npool
 * token ranges [pa[i], pb[i]) of it. Writes npool vectors, each the
 * L2-normalized mean of its range's final token states (the range [0, len)
 * is the text's own vector, as hmg_bert_embed gives it). Returns 0, or -1
 * for bad input (an empty or outside range, as hmg_bert_embed's). */
int hmg_bert_embed_late(hmg_bert *m, const int32_t *ids, int32_t len, const int32_t *pa, const int32_t *pb, int npool, float *out) {
    for (int i = 0; i < npool; i++)
        if (pa[i] < 0 || pb[i] <= pa[i] || pb[i] > len) return -1;
    return bert_forward_pool(m, ids, &len, 1, pa, pb, npool, out);
}

static int bert_forward_pool(hmg_bert *m, const int32_t *ids, const int32_t *lens, int n, const int32_t *pa, const int32_t *pb,
                             int npool, float *out) {
    if (n <= 0) return 0;
    int H = m->H, FF = m->FF, NH = m->NH, hd = H / NH;
    long total = 0;
    int maxlen = 0;
    for (int i = 0; i < n; i++) {
        if (lens[i] <= 0 || lens[i] > m->maxpos) return -1;
        total += lens[i];
        if (lens[i] > maxlen) maxlen = lens[i];
    }
    if (total > (1L << 24)) return -1;
    int T = (int)total;
    for (int t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= m->vocab) return -1;
    size_t TH = (size_t)T * H;
    int nbmax = FF / HMG_QK;
    float *x = (float *)hmg_alloc64(TH * sizeof(float)), *q = (float *)hmg_alloc64(TH * sizeof(float));
    float *k = (float *)hmg_alloc64(TH * sizeof(float)), *v = (float *)hmg_alloc64(TH * sizeof(float));
    float *ctx = (float *)hmg_alloc64(TH * sizeof(float)), *ao = (float *)hmg_alloc64(TH * sizeof(float));
    float *mid = (float *)hmg_alloc64((size_t)T * FF * sizeof(float));
    int8_t *aq = (int8_t *)malloc((size_t)T * FF);
    float *ad = (float *)malloc((size_t)T * nbmax * sizeof(float));
    int32_t *as = (int32_t *)malloc((size_t)T * nbmax * sizeof(int32_t));
    int *sstart = (int *)malloc(sizeof(int) * (size_t)T), *send = (int *)malloc(sizeof(int) * (size_t)T);
    int *pos = (int *)malloc(sizeof(int) * (size_t)T);
    int rc = -1;
    if (!x || !q || !k || !v || !ctx || !ao || !mid || !aq || !ad || !as || !sstart || !send || !pos) goto done;
    for (int i = 0, t = 0; i < n; i++) {
        int s0 = t;
        for (int j = 0; j < lens[i]; j++, t++) { sstart[t] = s0; send[t] = s0 + lens[i]; pos[t] = j; }
    }

#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; t++) {
        const float *w = m->word + (size_t)ids[t] * H, *p = m->pos + (size_t)pos[t] * H;
        float *r = x + (size_t)t * H;
        for (int i = 0; i < H; i++) r[i] = w[i] + p[i] + m->type[i];
    }
    hmg_layernorm_acts(x, NULL, m->eln_w, m->eln_b, T, H, m->eps, aq, ad, as);

    float scale = 1.f / sqrtf((float)hd);
    for (int l = 0; l < m->NL; l++) {
        hmg_bert_layer *ly = &m->layers[l];
        /* Q/K/V's input: x, prepared by the layer norm before */
        hmg_matmul_packed(ly->q, ly->qb, aq, ad, as, q, T);
        hmg_matmul_packed(ly->k, ly->kb, aq, ad, as, k, T);
        hmg_matmul_packed(ly->v, ly->vb, aq, ad, as, v, T);
        hmg_attention(q, k, v, ctx, sstart, send, T, H, NH, hd, scale, maxlen);
        hmg_acts(ctx, T, H, aq, ad, as);
        hmg_matmul_packed(ly->ao, ly->aob, aq, ad, as, ao, T);
        hmg_layernorm_acts(x, ao, ly->aln_w, ly->aln_b, T, H, m->eps, aq, ad, as);
        hmg_matmul_gelu_packed(ly->fi, ly->fib, aq, ad, as, mid, T);
        hmg_matmul_packed(ly->fo, ly->fob, aq, ad, as, ao, T);
        hmg_layernorm_acts(x, ao, ly->oln_w, ly->oln_b, T, H, m->eps, aq, ad, as);
    }

#pragma omp parallel for schedule(static)
    for (int i = 0; i < npool; i++) {
        float *o = out + (size_t)i * H;
        for (int e = 0; e < H; e++) o[e] = 0.f;
        for (int t = pa[i]; t < pb[i]; t++)
            for (int e = 0; e < H; e++) o[e] += x[(size_t)t * H + e];
        float norm = 0.f;
        for (int e = 0; e < H; e++) norm += o[e] * o[e];
        norm = norm > 1e-24f ? 1.f / sqrtf(norm) : 0.f;
        for (int e = 0; e < H; e++) o[e] *= norm;
    }
    rc = 0;
done:
    free(x); free(q); free(k); free(v); free(ctx); free(ao); free(mid); free(aq); free(ad); free(as);
    free(sstart); free(send); free(pos);
    return rc;
}
