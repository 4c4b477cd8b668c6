/* gpt_data.c — the transformer's token streams, on the host (gpt.h, "Data"). Row g of the
 * stream is a function of (seed, g) only: the stages give rank r of step s the rows
 * [(s·N + r)·B, (s·N + r + 1)·B), so N ranks × B rows see the same rows as 1 × N·B. */
#include "gpt.h"

#include "../kernels/zl_math.h"

#define ZL_STREAM_TOKENS 0x746f6b656e746f6bull /* "tokentok": apart from data and params */

void zl_gpt_sample_row(const unsigned char *text, size_t text_len, uint64_t seed, uint64_t g, int T, int V,
                       int32_t *window) {
    uint64_t key = seed ^ ZL_STREAM_TOKENS;
    if (text) { /* a window of the file's bytes; the caller checked text_len > T */
        size_t start = (size_t)(zl_hash2(key, g) % (uint64_t)(text_len - (size_t)T));
        for (int t = 0; t <= T; t++) /* V >= 256 with a text (args.c): the modulo folds nothing */
            window[t] = (int32_t)(text[start + (size_t)t] % (unsigned)V);
        return;
    }
    /* synthetic: a bigram stream, learnable (a fixed successor 3 times in 4) */
    uint64_t base = g * (uint64_t)(T + 1);
    window[0] = (int32_t)(zl_hash2(key, base) % (uint64_t)V);
    for (int t = 1; t <= T; t++) {
        uint64_t h = zl_hash2(key, base + (uint64_t)t);
        window[t] = (h & 3u) ? (int32_t)((7 * (int64_t)window[t - 1] + 1) % V) : (int32_t)((h >> 8) % (uint64_t)V);
    }
}

/* A stable counting sort: order lists the positions by token, increasing within a token;
 * bucket[v] is where token v's run starts, bucket[Vp] = R. The embedding backward sums each
 * run in this order: deterministic without atomics. */
void zl_gpt_token_order(const int32_t *tokens, int R, int Vp, int32_t *order, int32_t *bucket) {
    for (int v = 0; v <= Vp; v++) bucket[v] = 0;
    for (int i = 0; i < R; i++) bucket[tokens[i] + 1]++;
    for (int v = 0; v < Vp; v++) bucket[v + 1] += bucket[v];
    /* fill using bucket[v] as a cursor, then shift back */
    for (int i = 0; i < R; i++) order[bucket[tokens[i]]++] = i;
    for (int v = Vp; v > 0; v--) bucket[v] = bucket[v - 1];
    bucket[0] = 0;
}
