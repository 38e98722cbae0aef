/*
 * tinyaot int8 kernels: parameter structs (CMSIS-NN-style layout and conventions).
 *
 * Conventions shared by every kernel:
 *   - tensors are NHWC int8; dims are {n, h, w, c};
 *   - "offsets" are the NEGATED zero point for inputs and filters, and the PLAIN zero point for outputs, so that the
 *     kernels add them (x + input_offset) instead of subtracting;
 *   - requantization uses a Q0.31 multiplier and a shift with effective scale multiplier * 2^(shift - 31)
 *     (shift > 0 is a left shift, shift <= 0 a rounding right shift);
 *   - activation {min, max} is the int8 clamp applied after the output offset.
 */
#ifndef TINYAOT_NN_TYPES_H
#define TINYAOT_NN_TYPES_H

#include <stdint.h>

#include "tinyaot_compiler.h"
#include "tinyaot_status.h"

typedef struct {
    int32_t n;
    int32_t h;
    int32_t w;
    int32_t c;
} tinyaot_dims;

typedef struct {
    int32_t h;
    int32_t w;
} tinyaot_tile;

typedef struct {
    int32_t min;
    int32_t max;
} tinyaot_activation;

/* Optional scratch memory handed to a kernel; buf may be NULL when the kernel's _get_buffer_size is 0. */
typedef struct {
    void *buf;
    int32_t size;
} tinyaot_context;

/* padding = {top, left}; the bottom/right padding follows from output_dims. */
typedef struct {
    int32_t input_offset;
    int32_t output_offset;
    tinyaot_tile stride;
    tinyaot_tile padding;
    tinyaot_tile dilation;
    tinyaot_activation activation;
} tinyaot_conv_params;

typedef struct {
    int32_t input_offset;
    int32_t output_offset;
    tinyaot_tile stride;
    tinyaot_tile padding;
    tinyaot_tile dilation;
    tinyaot_activation activation;
    int32_t ch_mult;
} tinyaot_dw_conv_params;

typedef struct {
    int32_t input_offset;
    int32_t filter_offset;
    int32_t output_offset;
    tinyaot_activation activation;
} tinyaot_fc_params;

typedef struct {
    tinyaot_tile stride;
    tinyaot_tile padding;
    tinyaot_activation activation;
} tinyaot_pool_params;

/* One multiplier and shift per output channel. */
typedef struct {
    const int32_t *multiplier;
    const int32_t *shift;
} tinyaot_per_channel_quant_params;

typedef struct {
    int32_t multiplier;
    int32_t shift;
} tinyaot_per_tensor_quant_params;

/* Compressed weights (tinyaot/compress/storage.py; kernels in tinyaot_nn.h, shared code in tinyaot_nn_compressed.h).
   A "row" is one output channel's weights in the order of its dense filter: OHWI (conv) or [out][depth] (fully
   connected), and for depthwise the kh*kw taps of one channel (taken across the 1HWC filter). int4 weights need
   no struct: they are one uint8 array of two's-complement nibbles, low nibble first, row-major over the whole
   filter in its dense layout (1HWC for depthwise). */
typedef struct {
    const int8_t *codebooks; /* [groups][k] int8 values; output channel o uses codebook o / group_size */
    const uint8_t *packed;   /* per output channel row_bytes bytes: bits-wide indices, little-endian bit stream */
    int32_t bits;            /* 1..8, ceil(log2 k) */
    int32_t k;               /* entries per codebook, 1..256 */
    int32_t group_size;      /* output channels per codebook */
    int32_t row_bytes;       /* bytes per output channel, >= ceil(row_len * bits / 8) */
} tinyaot_clustered_weights;

/* Bitmap sparsity: per row ceil(row_len / 8) bitmap bytes (bit j % 8 of byte j / 8 set where weight j != 0), the
   nonzero values of all rows concatenated, row o's first value at values[row_offsets[o]]. */
typedef struct {
    const uint8_t *bitmap;
    const int8_t *values;
    const int32_t *row_offsets; /* [out_ch + 1] */
} tinyaot_sparse_weights;

/* Run-length sparsity: per row entries (runs[e], values[e]) = runs[e] zeros then the value; a stored value of 0
   bridges gaps over 255. Row o's entries are [row_offsets[o], row_offsets[o + 1]); trailing zeros are implied. */
typedef struct {
    const uint8_t *runs;
    const int8_t *values;
    const int32_t *row_offsets; /* [out_ch + 1] */
} tinyaot_rle_weights;

/* Block sparsity (tinyaot/compress/storage.py "sparse_block"): the [out_ch, K] weight rows in blocks of 4 output
   channels x 4 consecutive positions; only blocks holding a nonzero weight are stored. Block-row r (channels 4r ..
   4r+3) has counts[r] blocks; block b of the layer is 16 bytes at values + 16b (the kernel's layout: the fold
   kernels' four channels x four bytes, channel by channel, or Helium's, see the kernel files) and sits deltas[b]
   block columns after the previous block of its block-row (after column 0 for the first). fold_table: 1 when
   quant_params hold the fold kernels' requantization table (tinyaot_fold_support.h), 0 for multiplier/shift. */
typedef struct {
    const int8_t *values;
    const uint8_t *deltas;
    const uint16_t *counts;
    int32_t fold_table;
} tinyaot_block_weights;

/* 2x1 block sparsity (storage "sparse_block" with blocks of 2 output channels x 1 position, tinyaot/compress/
   encode.py; tinyaot_convolve_s8_block2x1.c): channel pair p (channels 2p, 2p+1) has ceil(K / 8) bytes of bitmap,
   bit j (byte j / 8, least significant first) set when window position j is kept, and per kept position, in
   increasing order, the pair's two weights in values; a pair with an odd number of kept positions is followed by
   one zero-weight block (the Helium kernel's values are in its own order: tinyaot_mve_block2x1.h). The kernels
   decode the positions into their scratch once per call: `decoded` bytes of it (the compiler's count for the
   kernel's layout: tinyaot/ops/compressed.py); for the Helium kernel `decoded` 0 says `bitmap` holds that
   stream itself instead (very sparse layers, where it takes no more bytes). fold_table as
   tinyaot_block_weights'. */
typedef struct {
    const int8_t *values;
    const uint8_t *bitmap;
    int32_t decoded;
    int32_t fold_table;
} tinyaot_block2x1_weights;

/* Int4 or clustered weights decoded once per call for a dense kernel (tinyaot_decode.h): codes of `bits` bits in
   one little-endian stream, in the dense kernel's weight order, regions of `region` codes each decoded with
   codebook ((r / div) * cycle + r % cycle) % mod of k int8 entries (cycle 1: (r / div) % mod; cycle 4: runs of one
   output channel cycling over a block's four channels, one codebook per channel). */
typedef struct {
    const uint8_t *packed;   /* the codes, in the dense kernel's weight order */
    const int8_t *codebooks; /* k entries per codebook */
    int32_t bits;            /* bits per code, 1..8 */
    int32_t k;               /* entries per codebook */
    int32_t region;          /* codes per region */
    int32_t div, mod;        /* region r: codebook ((r / div) * cycle + r % cycle) % mod */
    int32_t count;           /* codes in all */
    int32_t cycle;           /* 1, or the channels a block's runs cycle over */
} tinyaot_decoded_weights;

/* Elementwise binary ops (tinyaot_elementwise_binary_s8). */
#define TINYAOT_BINARY_ADD 0
#define TINYAOT_BINARY_SUB 1
#define TINYAOT_BINARY_MUL 2

/* ADD/SUB (TFLite): each input is offset, shifted left by left_shift and rescaled by its own mult/shift to a common
   scale; the sum or difference is rescaled by output_mult/shift. MUL: the product of the offset inputs is rescaled
   by output_mult/shift (s1 * s2 / s_out); the input mults, shifts and left_shift are unused. */
typedef struct {
    int32_t op; /* TINYAOT_BINARY_ADD, _SUB or _MUL */
    int32_t input_1_offset;
    int32_t input_1_mult;
    int32_t input_1_shift;
    int32_t input_2_offset;
    int32_t input_2_mult;
    int32_t input_2_shift;
    int32_t left_shift;
    int32_t output_offset;
    int32_t output_mult;
    int32_t output_shift;
    tinyaot_activation activation;
} tinyaot_binary_params;

/* Numpy broadcasting as strides: output element (i0, i1, i2, i3) of dims reads input k at
   sum(i_j * stride_k[j]); a stride of 0 repeats the input along that axis. */
typedef struct {
    int32_t dims[4];
    int32_t stride_1[4];
    int32_t stride_2[4];
} tinyaot_broadcast_shape;

/* The argument lists of the convolution, depthwise and fully connected kernel families (CMSIS-NN's order), for
   their definitions: `tinyaot_status tinyaot_convolve_s8(TINYAOT_CONV_ARGS(int8_t))`. tinyaot_nn.h and
   tinyaot_nn_mve.h spell every declaration out. filter_type is the weights' element or container type; the
   depthwise list names its bias argument (the Helium depthwise kernels read a requantization table there). */
#define TINYAOT_CONV_ARGS(filter_type)                                                                               \
    const tinyaot_context *ctx, const tinyaot_conv_params *conv_params,                                              \
        const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,                        \
        const int8_t *input, const tinyaot_dims *filter_dims, const filter_type *filter,                             \
        const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims, int8_t *output
#define TINYAOT_DW_CONV_ARGS(filter_type, bias)                                                                      \
    const tinyaot_context *ctx, const tinyaot_dw_conv_params *dw_conv_params,                                        \
        const tinyaot_per_channel_quant_params *quant_params, const tinyaot_dims *input_dims,                        \
        const int8_t *input, const tinyaot_dims *filter_dims, const filter_type *filter,                             \
        const tinyaot_dims *bias_dims, const int32_t *bias, const tinyaot_dims *output_dims, int8_t *output
#define TINYAOT_FC_ARGS(filter_type)                                                                                 \
    const tinyaot_context *ctx, const tinyaot_fc_params *fc_params,                                                  \
        const tinyaot_per_channel_quant_params *quant_params, int32_t per_channel,                                   \
        const tinyaot_dims *input_dims, const int8_t *input, const tinyaot_dims *filter_dims,                        \
        const filter_type *filter, const tinyaot_dims *bias_dims, const int32_t *bias,                               \
        const tinyaot_dims *output_dims, int8_t *output

#endif /* TINYAOT_NN_TYPES_H */
