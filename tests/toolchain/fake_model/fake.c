/* A stand-in for a generated model: output = input + 1, computed in two "layers" through the arena and a small
 * stack buffer, with a tinyaot_mark() between the layers as verification builds of real models have. Its loops
 * have fixed trip counts, so every sample executes exactly the same instructions. */
#include "fake.h"

#include "tinyaot_hal.h"

int8_t tinyaot_fake_arena[TINYAOT_FAKE_ARENA_SIZE] __attribute__((aligned(16)));

/* In .data, not .rodata, on purpose: outputs are only right if the start-up code copied .data from flash. */
int8_t tinyaot_fake_increment = 1;

int tinyaot_fake_invoke(const int8_t *input, int8_t *output)
{
    /* volatile so the compiler keeps this stack buffer: the harness's stack measurement must see it. */
    volatile int8_t scratch[TINYAOT_FAKE_INPUT_SIZE];
    int i;
    for (i = 0; i < TINYAOT_FAKE_INPUT_SIZE; ++i) {
        scratch[i] = (int8_t)(input[i] + tinyaot_fake_increment);
    }
    for (i = 0; i < TINYAOT_FAKE_INPUT_SIZE; ++i) {
        tinyaot_fake_arena[FAKE_ARENA_OFFSET + i] = scratch[i];
    }
    tinyaot_mark();
    for (i = 0; i < TINYAOT_FAKE_OUTPUT_SIZE; ++i) {
        output[i] = tinyaot_fake_arena[FAKE_ARENA_OFFSET + i];
    }
#ifdef FAKE_OVERRUN_BYTES
    /* A broken "kernel" for the canary tests: it writes the last 4 bytes of the arena and FAKE_OVERRUN_BYTES bytes
     * past its end. The pointer is read through a volatile so the compiler can neither see the out-of-bounds store
     * (and refuse it under -Werror) nor drop it. 0x11 differs from both of the harness's paint bytes. */
    {
        int8_t *volatile arena = tinyaot_fake_arena;
        for (i = TINYAOT_FAKE_ARENA_SIZE - 4; i < TINYAOT_FAKE_ARENA_SIZE + FAKE_OVERRUN_BYTES; ++i) {
            arena[i] = 0x11;
        }
    }
#endif
#ifdef FAKE_INVOKE_FAILS
    return 1;
#else
    return 0;
#endif
}
