/*
 * The 2x1 block-sparse kernels' bitmap decoding (tinyaot_convolve_s8_block2x1.c, tinyaot_convolve_s8_block2x1_mve.c):
 * per channel pair, flash holds a bitmap of its kept window positions (K bits, least significant first; tinyaot/
 * compress/encode.py), which the kernels turn into the position lists their multiply-add loops read, once per call
 * into their scratch (not once per multiply-add).
 *
 * Four positions per nibble of bitmap from a 16-word table: the nibble's set bits' positions, one byte each, plus
 * the nibble's first position in every byte of the word (K <= 256, so no byte carries), one unaligned word store,
 * the pointer advanced by the nibble's count: ~8 instructions per nibble on an M4, whatever the density.
 */
#ifndef TINYAOT_BLOCK2X1_DECODE_H
#define TINYAOT_BLOCK2X1_DECODE_H

#include <stdint.h>
#include <string.h>

/* Per nibble n the positions of its set bits (one byte each, lowest first) and their count. */
static const uint32_t tinyaot_b2x1_nibble_pos[16] = {0x0u,    0x0u,    0x1u,     0x100u,   0x2u,     0x200u,
                                                     0x201u,  0x20100u, 0x3u,     0x300u,   0x301u,   0x30100u,
                                                     0x302u,  0x30200u, 0x30201u, 0x3020100u};
static const uint8_t tinyaot_b2x1_nibble_count[16] = {0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4};

/* The set bits' positions of rb bitmap bytes (at most 32: positions below 256) into ix, one byte each; returns
   their count. Writes up to 3 bytes past them. */
static inline int32_t tinyaot_block2x1_bits8(const uint8_t *bm, int32_t rb, uint8_t *ix)
{
    uint8_t *const start = ix;
    const uint8_t *const end = bm + rb;
    uint32_t base = 0; /* the byte's first position, in every byte of the word */
    while (bm < end) { /* (a pointer bound: GCC's loop on a count took 4 more instructions per byte on the M4) */
        const uint32_t v = *bm++;
        uint32_t t = tinyaot_b2x1_nibble_pos[v & 15u] + base;
        memcpy(ix, &t, 4);
        ix += tinyaot_b2x1_nibble_count[v & 15u];
        t = tinyaot_b2x1_nibble_pos[v >> 4] + base + 0x04040404u;
        memcpy(ix, &t, 4);
        ix += tinyaot_b2x1_nibble_count[v >> 4];
        base += 0x08080808u;
    }
    return (int32_t)(ix - start);
}

/* One channel pair's kept positions (uint8: K <= 256) from its rb bitmap bytes into ix, an odd count filled with the
   last position again (its filler block's weights are 0); returns the count (even). Writes up to 3 bytes past. */
static inline int32_t tinyaot_block2x1_positions8(const uint8_t *bm, int32_t rb, uint8_t *ix)
{
    int32_t n = tinyaot_block2x1_bits8(bm, rb, ix);
    if (n & 1) {
        ix[n] = ix[n - 1];
        n++;
    }
    return n;
}

#endif /* TINYAOT_BLOCK2X1_DECODE_H */
