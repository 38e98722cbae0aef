/*
 * Weights decoded once per call into RAM, for the kernels that run the dense kernels' fast paths on int4 and
 * clustered weights (tinyaot_*_decoded.c): the compressed codes are kept in flash in the dense kernel's own weight
 * layout (tinyaot/ops/decoded.py permutes them at compile time), so decoding is a linear walk that writes each
 * weight where the dense kernel reads it, and every weight is decoded once per inference instead of once per
 * multiply-accumulate (the tinyaot_*_s4 / _s8_clustered kernels decode in their inner loops).
 *
 * The codes form one little-endian bit stream of `bits` bits each (code i in bits [i*bits, (i+1)*bits), bit j of
 * the stream is bit j % 8 of byte j / 8). They are cut into regions of `region` codes (the last may be shorter),
 * each decoded with one codebook of k int8 entries: region r with codebook ((r / div) * cycle + r % cycle) % mod
 * (cycle 1: (r / div) % mod, a codebook per block of regions; cycle 4: regions that are runs of one output channel
 * cycling over a block's four channels, one codebook per channel). int4 weights are the codebook {0, 1, ..., 7,
 * -8, ..., -1} of their two's-complement nibbles.
 *
 * int4 weights (k = 0, no codebook) are not that stream but split-nibble words, so that eight weights decode in a
 * few word operations on any core: codes 8j .. 8j+7 are the four bytes 4j .. 4j+3, byte i holding code 8j+i in its
 * low nibble and code 8j+4+i in its high nibble, each as u = w + 8 (0..15). Per byte lane, w = ((u + 0x78) ^ 0x80)
 * as int8: u + 0x78 stays below 0x100, so a word's four lanes never carry into each other.
 */
#ifndef TINYAOT_DECODE_H
#define TINYAOT_DECODE_H

#include "tinyaot_nn_support.h"
#include "tinyaot_mve_support.h"

/* tinyaot_decoded_weights: tinyaot_nn_types.h */

/* A decoded tile of at most this many bytes goes in a local array of the kernel (its stack frame) instead of the
   caller's scratch, so the dense fast path runs on decoded weights without growing the arena. The compiler plans
   the scratch by the same number (tinyaot/ops/decoded.py STACK_TILE) and offers these kernels only on boards whose
   stack reserve is at least four times it. */
#define TINYAOT_DECODE_STACK_TILE 1024

/* dst[0 .. n) = the weights of codes first .. first+n-1 of f (any regions; tinyaot_decode.c). One function for
   every decoded kernel of a firmware: its paths (int4 words, 4-, 5- and 8-bit lookups, the cycled fold layout, any
   width) are linked once, not once per kernel file. */
void tinyaot_decode(const tinyaot_decoded_weights *f, int32_t first, int32_t n, int8_t *dst);

#endif /* TINYAOT_DECODE_H */
