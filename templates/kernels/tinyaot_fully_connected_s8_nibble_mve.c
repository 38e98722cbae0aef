/*
 * Helium fully connected kernels on 4-bit weights read straight from flash, two output rows per byte
 * (tinyaot/ops/mve.py nibble_filter): a batch-1 layer uses each weight once, so the weights are not decoded into
 * RAM first; each 16-byte load carries 32 weights and their unpacking costs what the dense kernel's second load
 * would have.
 *
 * Layout: rows padded to a multiple of four, columns to k16 (k rounded up to a multiple of 16); per block of four
 * rows, per chunk of 16 columns, 16 bytes for rows (0, 1) then 16 bytes for rows (2, 3); byte j of a pair holds
 * the lower row's nibble at column j in bits 0..3 and the upper row's in bits 4..7.
 *
 * tinyaot_fully_connected_s4_mve (int4 weights w in [-8, 7]): the lower nibble is u = w + 8 in [0, 15], the upper one
 * the upper row's w' in two's complement, so the byte read as int8 is p = u + 16 * w' (in [-128, 127]). Per pair
 * and chunk one VMLADAVA of p and one of (p & 15) against the 16 activations a give X = U + 16 * W' and U, where
 * U = sum a * u = W + 8 * S (S = sum a, once per row of the input): the lower row's W = U - 8 * S and the upper
 * row's W' = (X - U) >> 4, exact (X - U is 16 * W'). VLDRB, VAND and two VMLADAVA per 32 weights: the dense
 * kernel's two loads and two VMLADAVA.
 *
 * tinyaot_fully_connected_s8_clustered_mve (clustered weights, at most 16 entries per codebook): the nibbles are
 * codes, row o's weight is codebooks[o / group_size][code] (its packed codes in the layout above; row_bytes
 * unused). Per pair and chunk VLDRB, VAND, VSHR and two byte gathers (VLDRB.U8 Qd, [Rn, Qm]) from the two rows'
 * codebooks, then two VMLADAVA.
 *
 * 5-bit clustered codes (17..32 entries, tinyaot/ops/mve.py nibble5_filter): the codes' low four bits as above,
 * and after every two chunks of a block (or its last single one) 16 bytes of their fifth bits: byte j bit r for
 * row r at column j of the first chunk, bit 4 + r of the second. Per row and chunk the index is the nibble with
 * its fifth bit shifted in (VSLI.8 / VSRI.8 #4 of the bits, VAND 31), then a gather and a VMLADAVA.
 *
 * Bias: the input offset folded in over the decoded weights (bias[o] = b[o] + input_offset * sum w[o]), bias,
 * multipliers and shifts padded to a multiple of four (tinyaot_nn_mve.h). The activations' last partial chunk is
 * a zeroing predicated load, so the padded columns' nibbles never count.
 *
 * Overflow: VMLADAVA adds modulo 2^32. The exact values of U (|u| <= 15), X (|p| <= 128), S and 16 * W'
 * (|w'| <= 8) are each at most 128 * 128 * k16 in magnitude, which the compiler keeps below 2^31 (k16 <= 65536,
 * tinyaot/ops/mve.py NIBBLE_MAX_DEPTH), so the wrapped differences are exact; the final sums are the layer's,
 * bounded by compress/bounds.py. The portable path (other cores, the host) decodes each weight and accumulates
 * sum a * w (at most 128 * 128 * k in magnitude) before adding the bias once.
 */
#include "tinyaot_nn_mve.h"
#include "tinyaot_mve_gemm.h"

static int32_t nibble_args_bad(const tinyaot_fc_params *fc_params, int32_t per_channel, const tinyaot_dims *input_dims,
                               const tinyaot_dims *filter_dims, const tinyaot_dims *output_dims, const int32_t *bias,
                               const void *filter)
{
    const int32_t depth = filter_dims->n;
    return input_dims->h * input_dims->w * input_dims->c != depth || output_dims->c != filter_dims->c ||
           fc_params->filter_offset != 0 || !per_channel || bias == NULL || filter == NULL || depth <= 0 ||
           depth > 65536;
}

#if TINYAOT_USE_MVE

/* One chunk of a clustered block against activations xv: the codes of rows (0, 1) and (2, 3), their weights
   gathered from each row's codebook (c0..c3), into a0..a3; w advances past the chunk. */
#define NIBBLE_GATHER4(xv)                                                                                        \
    do {                                                                                                          \
        const uint8x16_t b0_ = vldrbq_u8(w);                                                                      \
        const uint8x16_t b1_ = vldrbq_u8(w + 16);                                                                 \
        w += 32;                                                                                                  \
        a0 = vmladavaq_s8(a0, (xv), vldrbq_gather_offset_s8(c0, vandq_u8(b0_, vdupq_n_u8(15))));                 \
        a1 = vmladavaq_s8(a1, (xv), vldrbq_gather_offset_s8(c1, vshrq_n_u8(b0_, 4)));                            \
        a2 = vmladavaq_s8(a2, (xv), vldrbq_gather_offset_s8(c2, vandq_u8(b1_, vdupq_n_u8(15))));                 \
        a3 = vmladavaq_s8(a3, (xv), vldrbq_gather_offset_s8(c3, vshrq_n_u8(b1_, 4)));                            \
    } while (0)

/* The four sums of block o -> its four outputs (lanes past n_out not stored). */
static TINYAOT_ALWAYS_INLINE void nibble_store(int32_t r0, int32_t r1, int32_t r2, int32_t r3,
                                               const tinyaot_mve_epilogue *e, int32_t o, int32_t n_out, int8_t *out)
{
    const mve_pred16_t p4 = vctp32q((uint32_t)(n_out - o));
    const tinyaot_mve_block b = tinyaot_mve_block_of(e, o, p4);
    tinyaot_mve_store4(tinyaot_mve_lanes(r0, r1, r2, r3), e, &b, p4, out + o);
}

/* The codebook of row o + i > o of a clustered block (a padded row past the last, n_out - 1, reads the last row's). */
#define NIBBLE_BOOK(o, i) (cb + k_cb * (((o) + (i) < last ? (o) + (i) : last) / group_size))

/* One row of input x (k values) against every block of int4 weights (the blocks follow each other in flash). */
static void nibble_row_s4(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const int8_t *cb,
                          int32_t k_cb, int32_t group_size, const tinyaot_mve_requant *q, int8_t *out)
{
    (void)cb, (void)k_cb, (void)group_size;
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int32_t t = k & 15;
    const int8x16_t x_tail = vldrbq_z_s8(x + (k & ~15), vctp8q((uint32_t)t));
    const int8x16_t m = vdupq_n_s8(15);
    int32_t s8 = 0; /* 8 * sum of the row's activations */
    int32_t o, n;
    const int8_t *xs = x;
    for (n = k >> 4; n > 0; n--, xs += 16) {
        s8 = vaddvaq_s8(s8, vldrbq_s8(xs));
    }
    s8 = 8 * vaddvaq_s8(s8, x_tail);
    for (o = 0; o < n_out; o += 4) {
        /* a0 / a2: U - 8 * S of pair (0, 1) / (2, 3); a1 / a3: X - 8 * S (the difference is X - U) */
        int32_t a0 = -s8, a1 = -s8, a2 = -s8, a3 = -s8;
        xs = x;
        for (n = k >> 4; n > 0; n--) {
            const int8x16_t xv = vldrbq_s8(xs);
            const int8x16_t p0 = vldrbq_s8((const int8_t *)w);
            const int8x16_t p1 = vldrbq_s8((const int8_t *)w + 16);
            xs += 16;
            w += 32;
            a1 = vmladavaq_s8(a1, xv, p0);
            a0 = vmladavaq_s8(a0, xv, vandq_s8(p0, m));
            a3 = vmladavaq_s8(a3, xv, p1);
            a2 = vmladavaq_s8(a2, xv, vandq_s8(p1, m));
        }
        if (t > 0) {
            const int8x16_t p0 = vldrbq_s8((const int8_t *)w);
            const int8x16_t p1 = vldrbq_s8((const int8_t *)w + 16);
            w += 32;
            a1 = vmladavaq_s8(a1, x_tail, p0);
            a0 = vmladavaq_s8(a0, x_tail, vandq_s8(p0, m));
            a3 = vmladavaq_s8(a3, x_tail, p1);
            a2 = vmladavaq_s8(a2, x_tail, vandq_s8(p1, m));
        }
        /* unsigned differences: the wrapped int32 values are the exact ones (see the header) */
        nibble_store(a0, (int32_t)((uint32_t)a1 - (uint32_t)a0) >> 4, a2, (int32_t)((uint32_t)a3 - (uint32_t)a2) >> 4,
                     &e, o, n_out, out);
    }
}

/* One row of input x (k values) against every block of clustered codes; codebooks of k_cb entries, one per
   group_size rows. */
static void nibble_row_cl(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const int8_t *cb,
                          int32_t k_cb, int32_t group_size, const tinyaot_mve_requant *q, int8_t *out)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int32_t t = k & 15;
    const int8x16_t x_tail = vldrbq_z_s8(x + (k & ~15), vctp8q((uint32_t)t));
    const int32_t last = n_out - 1;
    int32_t o;
    for (o = 0; o < n_out; o += 4) {
        const int8_t *c0 = cb + k_cb * (o / group_size), *c1 = NIBBLE_BOOK(o, 1), *c2 = NIBBLE_BOOK(o, 2),
                     *c3 = NIBBLE_BOOK(o, 3);
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int32_t n;
        { /* chunk n at wb + 32 n (advancing w itself, GCC 12 set up more per block: measured +2,010 instructions
             on ad_fc_autoencoder --clusters 16, 112,253 -> 114,263) */
            const uint8_t *wb = w;
            for (n = 0; n < (k >> 4); n++) {
                const int8x16_t xv = vldrbq_s8(x + 16 * n);
                w = wb + 32 * n;
                NIBBLE_GATHER4(xv);
            }
            w = wb + 32 * (k >> 4);
        }
        if (t > 0) {
            NIBBLE_GATHER4(x_tail);
        }
        nibble_store(a0, a1, a2, a3, &e, o, n_out, out);
    }
}

/* One 5-bit chunk of a block against activations xv: nibbles at w (rows (0, 1)) and w + 16 (rows (2, 3)), fifth
   bits in pl at bits s .. s + 3 (s = 0 or 4: the pair's first or second chunk), into a0..a3. */
#define NIBBLE5_CHUNK(xv, pl, s)                                                                                  \
    do {                                                                                                          \
        const uint8x16_t b0_ = vldrbq_u8(w);                                                                      \
        const uint8x16_t b1_ = vldrbq_u8(w + 16);                                                                 \
        const uint8x16_t m_ = vdupq_n_u8(31);                                                                     \
        w += 32;                                                                                                  \
        a0 = vmladavaq_s8(a0, (xv), vldrbq_gather_offset_s8(c0, vandq_u8(vsliq_n_u8(b0_, (s) ? vshrq_n_u8(pl, (s) ? (s) : 1) : (pl), 4), m_)));\
        a1 = vmladavaq_s8(a1, (xv), vldrbq_gather_offset_s8(c1, vandq_u8(vsriq_n_u8(s ? vshrq_n_u8(pl, 1) :          \
                                                                        vshlq_n_u8(pl, 3), b0_, 4), m_)));        \
        a2 = vmladavaq_s8(a2, (xv), vldrbq_gather_offset_s8(c2, vandq_u8(vsliq_n_u8(b1_, vshrq_n_u8(pl, s + 2), 4), \
                                                                         m_)));                                   \
        a3 = vmladavaq_s8(a3, (xv), vldrbq_gather_offset_s8(c3, vandq_u8(vsriq_n_u8(s ? vshrq_n_u8(pl, 3) :          \
                                                                        vshlq_n_u8(pl, 1), b1_, 4), m_)));        \
    } while (0)

/* nibble_row_cl for 5-bit codes (the layout above): chunks in pairs, then a last single chunk. */
static void nibble_row_cl5(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const int8_t *cb,
                           int32_t k_cb, int32_t group_size, const tinyaot_mve_requant *q, int8_t *out)
{
    const tinyaot_mve_epilogue e = tinyaot_mve_epilogue_of(q);
    const int32_t t = k & 15;
    const int32_t full = k >> 4;
    const int8x16_t x_tail = vldrbq_z_s8(x + (k & ~15), vctp8q((uint32_t)t));
    const int32_t last = n_out - 1;
    int32_t o;
    for (o = 0; o < n_out; o += 4) {
        const int8_t *c0 = cb + k_cb * (o / group_size), *c1 = NIBBLE_BOOK(o, 1), *c2 = NIBBLE_BOOK(o, 2),
                     *c3 = NIBBLE_BOOK(o, 3);
        const int8_t *xs = x;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int32_t n;
        for (n = full >> 1; n > 0; n--) {
            const uint8x16_t pl = vldrbq_u8(w + 64);
            const int8x16_t xa = vldrbq_s8(xs);
            const int8x16_t xb = vldrbq_s8(xs + 16);
            xs += 32;
            NIBBLE5_CHUNK(xa, pl, 0);
            NIBBLE5_CHUNK(xb, pl, 4);
            w += 16;
        }
        if (full & 1) { /* a full chunk, then the tail (a pair) or nothing (a single chunk) */
            const uint8x16_t pl = vldrbq_u8(w + (t > 0 ? 64 : 32));
            const int8x16_t xa = vldrbq_s8(xs);
            NIBBLE5_CHUNK(xa, pl, 0);
            if (t > 0) {
                NIBBLE5_CHUNK(x_tail, pl, 4);
            }
            w += 16;
        } else if (t > 0) { /* the tail alone */
            const uint8x16_t pl = vldrbq_u8(w + 32);
            NIBBLE5_CHUNK(x_tail, pl, 0);
            w += 16;
        }
        nibble_store(a0, a1, a2, a3, &e, o, n_out, out);
    }
}

#else /* portable C: the same integers */

/* (only the portable path reads codes one by one; the Helium loops above take whole chunks) */
/* The weight of row o (0 <= o < rows padded to four) at column i of the layout above: its nibble as a code. */
static inline uint32_t nibble_code(const uint8_t *filter, int32_t k16, int32_t o, int32_t i)
{
    const uint32_t b = filter[(o >> 2) * 2 * k16 + (i >> 4) * 32 + ((o >> 1) & 1) * 16 + (i & 15)];
    return (o & 1) ? b >> 4 : b & 15u;
}

/* The 5-bit code of row o at column i of the 5-bit layout above (k16 columns). */
static inline uint32_t nibble_code5(const uint8_t *filter, int32_t k16, int32_t o, int32_t i)
{
    const int32_t chunks = k16 >> 4;
    const int32_t c = i >> 4;
    const uint8_t *pair = filter + (o >> 2) * (32 * chunks + 16 * ((chunks + 1) >> 1)) + 80 * (c >> 1);
    const int32_t in_pair = (c | 1) < chunks ? 2 : 1; /* chunks in this pair */
    const uint32_t lo = (pair[32 * (c & 1) + 16 * ((o >> 1) & 1) + (i & 15)] >> (4 * (o & 1))) & 15u;
    return lo | (((uint32_t)pair[32 * in_pair + (i & 15)] >> (4 * (c & 1) + (o & 3)) & 1u) << 4);
}

static void nibble_row(const int8_t *x, int32_t k, const uint8_t *filter, int32_t n_out, const int8_t *cb,
                       int32_t k_cb, int32_t group_size, int32_t bits, const tinyaot_mve_requant *q, int8_t *out)
{
    const int32_t k16 = (k + 15) & ~15;
    int32_t o;
    for (o = 0; o < n_out; o++) {
        int32_t acc = 0;
        int32_t i;
        for (i = 0; i < k; i++) {
            const int32_t code = (int32_t)(bits == 5 ? nibble_code5(filter, k16, o, i) : nibble_code(filter, k16, o, i));
            /* int4: the lower row's nibble is w + 8, the upper row's w in two's complement */
            const int32_t w = cb != NULL ? cb[k_cb * (o / group_size) + code] : (o & 1) ? ((code ^ 8) - 8) : code - 8;
            acc += (int32_t)x[i] * w;
        }
        out[o] = tinyaot_requantize_s8(acc + q->bias[o], q->mult[o], q->shift[o], q->out_off, q->act_min, q->act_max);
    }
}

static void nibble_row_s4(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const int8_t *cb,
                          int32_t k_cb, int32_t group_size, const tinyaot_mve_requant *q, int8_t *out)
{
    nibble_row(x, k, w, n_out, cb, k_cb, group_size, 4, q, out);
}
#define nibble_row_cl nibble_row_s4 /* the same walk: cb != NULL selects the codebook lookups */

static void nibble_row_cl5(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const int8_t *cb,
                           int32_t k_cb, int32_t group_size, const tinyaot_mve_requant *q, int8_t *out)
{
    nibble_row(x, k, w, n_out, cb, k_cb, group_size, 5, q, out);
}

#endif

/* One kernel's row walk (each entry names its own, so a model links only the ones its layers use). */
typedef void (*nibble_row_fn)(const int8_t *x, int32_t k, const uint8_t *w, int32_t n_out, const int8_t *cb,
                              int32_t k_cb, int32_t group_size, const tinyaot_mve_requant *q, int8_t *out);

/* Inlined into each entry, so that `row` is a direct call there (through a pointer GCC neither inlines the row
   walk nor keeps its constants in registers: measured +16 % instructions on ad_fc_autoencoder int4). */
static TINYAOT_ALWAYS_INLINE tinyaot_status nibble_layer(const tinyaot_fc_params *fc_params,
                                   const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,
                                   const int8_t *input, const tinyaot_dims *filter_dims, const uint8_t *filter,
                                   const int8_t *cb, int32_t k_cb, int32_t group_size, nibble_row_fn row,
                                   const int32_t *bias, int8_t *output)
{
    const int32_t depth = filter_dims->n;
    const int32_t out_c = filter_dims->c;
    tinyaot_mve_requant q;
    int32_t b;
    TINYAOT_MVE_REQUANT_SET(q, bias, quant_params, fc_params);
    for (b = 0; b < input_dims->n; b++) {
        row(input + b * depth, depth, filter, out_c, cb, k_cb, group_size, &q, output + b * out_c);
    }
    return TINYAOT_OK;
}

/* The clustered entries' checks: the filter struct fits `bits`-wide indices. */
static int32_t nibble_clustered_bad(const tinyaot_clustered_weights *filter, int32_t bits)
{
    return filter->bits != bits || filter->k < 1 || filter->k > (1 << bits) || filter->group_size < 1 ||
           filter->packed == NULL || filter->codebooks == NULL;
}

tinyaot_status tinyaot_fully_connected_s4_mve(TINYAOT_FC_ARGS(int8_t))
{
    (void)ctx;
    (void)bias_dims;
    if (nibble_args_bad(fc_params, per_channel, input_dims, filter_dims, output_dims, bias, filter)) {
        return TINYAOT_ARG_ERROR;
    }
    return nibble_layer(fc_params, quant_params, input_dims, input, filter_dims, (const uint8_t *)filter, NULL, 0, 1,
                        nibble_row_s4, bias, output);
}

tinyaot_status tinyaot_fully_connected_s8_clustered_mve(TINYAOT_FC_ARGS(tinyaot_clustered_weights))
{
    (void)ctx;
    (void)bias_dims;
    if (nibble_args_bad(fc_params, per_channel, input_dims, filter_dims, output_dims, bias, filter) ||
        nibble_clustered_bad(filter, 4)) {
        return TINYAOT_ARG_ERROR;
    }
    return nibble_layer(fc_params, quant_params, input_dims, input, filter_dims, filter->packed, filter->codebooks,
                        filter->k, filter->group_size, nibble_row_cl, bias, output);
}

tinyaot_status tinyaot_fully_connected_s8_clustered5_mve(TINYAOT_FC_ARGS(tinyaot_clustered_weights))
{
    (void)ctx;
    (void)bias_dims;
    if (nibble_args_bad(fc_params, per_channel, input_dims, filter_dims, output_dims, bias, filter) ||
        nibble_clustered_bad(filter, 5)) {
        return TINYAOT_ARG_ERROR;
    }
    return nibble_layer(fc_params, quant_params, input_dims, input, filter_dims, filter->packed, filter->codebooks,
                        filter->k, filter->group_size, nibble_row_cl5, bias, output);
}
