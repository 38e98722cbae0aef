/* Two tinyaot models in one firmware: kws_dscnn and tflm_hello_world_sine, each with its own header and invoke
 * function (tinyaot_<name>_...), linked side by side, sharing one arena: they never run at the same time, so the
 * firmware owns one buffer as large as the larger of their arenas (not their sum) and hands it to each model's
 * invoke_with_arena. CMakeLists.txt compiles both model files with -DTINYAOT_<NAME>_NO_STATIC_ARENA, so neither
 * keeps a static arena of its own.
 *
 * Under QEMU with semihosting: reads one int8 input per model (kws_input.bin, sine_input.bin, already quantized
 * with each header's INPUT_SCALE / INPUT_ZERO_POINT), runs keyword spotting, the sine model, then keyword
 * spotting again in the same buffer (its result must not change: a model keeps nothing in the arena between
 * inferences), writes the int8 outputs to kws_output.bin and sine_output.bin and prints the keyword class and the
 * shared arena's size. Exit status 0 on success. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kws_dscnn.h"
#include "tflm_hello_world_sine.h"
#include "tinyaot_compiler.h"
#include "tinyaot_hal.h"

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define SHARED_ARENA_SIZE MAX(TINYAOT_KWS_DSCNN_ARENA_SIZE, TINYAOT_TFLM_HELLO_WORLD_SINE_ARENA_SIZE)
#define SHARED_ARENA_ALIGNMENT MAX(TINYAOT_KWS_DSCNN_ARENA_ALIGNMENT, TINYAOT_TFLM_HELLO_WORLD_SINE_ARENA_ALIGNMENT)

/* The one arena of both models (each header states the size and alignment it needs). */
TINYAOT_ALIGNAS(SHARED_ARENA_ALIGNMENT) static int8_t shared_arena[SHARED_ARENA_SIZE];

static int8_t kws_input[TINYAOT_KWS_DSCNN_INPUT_SIZE];
static int8_t kws_output[TINYAOT_KWS_DSCNN_OUTPUT_SIZE];
static int8_t kws_again[TINYAOT_KWS_DSCNN_OUTPUT_SIZE];
static int8_t sine_input[TINYAOT_TFLM_HELLO_WORLD_SINE_INPUT_SIZE];
static int8_t sine_output[TINYAOT_TFLM_HELLO_WORLD_SINE_OUTPUT_SIZE];

static int load(const char *path, void *buf, size_t len)
{
    int fd = tinyaot_hal_open(path, TINYAOT_HAL_OPEN_READ);
    int ok = fd >= 0 && tinyaot_hal_flen(fd) == (long)len && tinyaot_hal_read(fd, buf, len) == len;
    return (fd >= 0 && tinyaot_hal_close(fd) == 0) && ok;
}

static int save(const char *path, const void *buf, size_t len)
{
    int fd = tinyaot_hal_open(path, TINYAOT_HAL_OPEN_WRITE);
    int ok = fd >= 0 && tinyaot_hal_write(fd, buf, len) == len;
    return (fd >= 0 && tinyaot_hal_close(fd) == 0) && ok;
}

int main(void)
{
    size_t i, best = 0;

    if (!load("kws_input.bin", kws_input, sizeof kws_input) ||
        !load("sine_input.bin", sine_input, sizeof sine_input)) {
        tinyaot_hal_puts("two_models: cannot read kws_input.bin / sine_input.bin\n");
        return 1;
    }
    if (tinyaot_kws_dscnn_invoke_with_arena(shared_arena, kws_input, kws_output) != TINYAOT_OK ||
        tinyaot_tflm_hello_world_sine_invoke_with_arena(shared_arena, sine_input, sine_output) != TINYAOT_OK ||
        tinyaot_kws_dscnn_invoke_with_arena(shared_arena, kws_input, kws_again) != TINYAOT_OK) {
        tinyaot_hal_puts("two_models: a model reported an error\n");
        return 2;
    }
    if (memcmp(kws_output, kws_again, sizeof kws_output) != 0) {
        tinyaot_hal_puts("two_models: keyword spotting changed after the sine model ran\n");
        return 3;
    }
    for (i = 1; i < sizeof kws_output; ++i) {
        if (kws_output[i] > kws_output[best]) {
            best = i;
        }
    }
    tinyaot_hal_puts("two_models: keyword class ");
    tinyaot_hal_put_uint((uint32_t)best);
    tinyaot_hal_puts(", shared arena ");
    tinyaot_hal_put_uint((uint32_t)sizeof shared_arena);
    tinyaot_hal_puts(" bytes\n");
    if (!save("kws_output.bin", kws_output, sizeof kws_output) ||
        !save("sine_output.bin", sine_output, sizeof sine_output)) {
        tinyaot_hal_puts("two_models: cannot write the outputs\n");
        return 4;
    }
    return 0;
}
