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

#endif /* TINYAOT_NN_TYPES_H */
