/*
 * tinyaot_convolve_s8_clustered: tinyaot_convolve_s8 with clustered weights: output channel o's weights are
 * codebooks[o / group_size][index], the indices bits wide (bits = ceil(log2 k), 1..8), packed per channel as a
 * little-endian bit stream of row_bytes bytes (tinyaot_clustered_weights).
 *
 * Four-pixel im2col columns by position pair (tinyaot_nn_compressed.h): two indices are looked up into one pair of
 * weights that a single SMLAD per pixel multiplies with two positions of the column. 8-, 4- and 2-bit indices
 * never straddle a byte and are unpacked with constant shifts and masks (4-bit: a word of eight at a time on DSP
 * cores); other widths (1, 3, 5, 6, 7 bits) go through a small bit buffer, refilled a byte at a
 * time (it holds fewer than bits + 8 <= 16 bits, so a 32-bit word never overflows). Chunked calls (no scratch)
 * start at multiples of 16 positions, which are byte boundaries for every width, so the buffer starts empty.
 */
#include "tinyaot_nn_compressed.h"

static TINYAOT_ALWAYS_INLINE void cl_begin(const void *weights, int32_t row, int32_t row_len, tinyaot_cursor *cur)
{
    const tinyaot_clustered_weights *w = (const tinyaot_clustered_weights *)weights;
    (void)row_len;
    cur->bytes = w->packed + row * w->row_bytes;
    cur->values = w->codebooks + (row / w->group_size) * w->k;
}

static TINYAOT_ALWAYS_INLINE void cl_dot4(const void *weights, tinyaot_cursor *cur, const int16_t *col, int32_t n,
                                          int32_t acc[4])
{
    const tinyaot_clustered_weights *w = (const tinyaot_clustered_weights *)weights;
    const uint8_t *p = cur->bytes;
    const int8_t *cb = cur->values;
    int32_t a0 = acc[0];
    int32_t a1 = acc[1];
    int32_t a2 = acc[2];
    int32_t a3 = acc[3];
    int32_t i = 0;
    if (w->bits == 8) {
        for (; i + 2 <= n; i += 2) {
            const int32_t v0 = cb[p[0]];
            const int32_t v1 = cb[p[1]];
            p += 2;
            TINYAOT_MAC4P_INC(col, v0, v1);
        }
        if (i < n) {
            TINYAOT_MAC4P_INC(col, cb[*p++], 0);
        }
    } else if (w->bits == 4) {
#if TINYAOT_USE_DSP
        for (; i + 8 <= n; i += 8) { /* four bytes per (unaligned) word load, four position pairs */
            uint32_t u;
            __builtin_memcpy(&u, p, 4);
            p += 4;
            TINYAOT_MAC4P_INC(col, cb[u & 15u], cb[(u >> 4) & 15u]);
            TINYAOT_MAC4P_INC(col, cb[(u >> 8) & 15u], cb[(u >> 12) & 15u]);
            TINYAOT_MAC4P_INC(col, cb[(u >> 16) & 15u], cb[(u >> 20) & 15u]);
            TINYAOT_MAC4P_INC(col, cb[(u >> 24) & 15u], cb[u >> 28]);
        }
#endif
        for (; i + 2 <= n; i += 2) { /* one byte, one position pair */
            const uint32_t byte = *p++;
            TINYAOT_MAC4P_INC(col, cb[byte & 15u], cb[byte >> 4]);
        }
        if (i < n) {
            TINYAOT_MAC4P_INC(col, cb[*p++ & 15u], 0);
        }
    } else if (w->bits == 2) {
        for (; i + 4 <= n; i += 4) { /* one byte, two position pairs */
            const uint32_t byte = *p++;
            TINYAOT_MAC4P_INC(col, cb[byte & 3u], cb[(byte >> 2) & 3u]);
            TINYAOT_MAC4P_INC(col, cb[(byte >> 4) & 3u], cb[byte >> 6]);
        }
        if (i < n) {
            const uint32_t byte = *p++;
            const int32_t v2 = (i + 2 < n) ? cb[(byte >> 4) & 3u] : 0;
            if (i + 1 < n) {
                TINYAOT_MAC4P_INC(col, cb[byte & 3u], cb[(byte >> 2) & 3u]);
                if (i + 2 < n) {
                    TINYAOT_MAC4P_INC(col, v2, 0);
                }
            } else {
                TINYAOT_MAC4P_INC(col, cb[byte & 3u], 0);
            }
        }
    } else {
        /* any width: a bit buffer holding fewer than bits + 8 <= 16 bits, refilled a byte at a time */
        const int32_t bits = w->bits;
        const uint32_t mask = (1u << bits) - 1u;
        uint32_t buf = 0;
        int32_t have = 0;
        for (; i < n; i += 2) {
            int32_t v[2];
            int32_t h;
            for (h = 0; h < 2; h++) {
                v[h] = 0;
                if (i + h < n) {
                    if (have < bits) {
                        buf |= (uint32_t)*p++ << have;
                        have += 8;
                    }
                    v[h] = cb[buf & mask];
                    buf >>= bits;
                    have -= bits;
                }
            }
            TINYAOT_MAC4P_INC(col, v[0], v[1]);
        }
    }
    cur->bytes = p;
    acc[0] = a0;
    acc[1] = a1;
    acc[2] = a2;
    acc[3] = a3;
}

TINYAOT_CW_CONV_KERNEL(tinyaot_convolve_s8_clustered, tinyaot_clustered_weights,
                       TINYAOT_CLUSTERED_OK(filter, filter_dims->h * filter_dims->w * filter_dims->c),
                       TINYAOT_CW_BY_PAIR, cl_begin, cl_dot4)
