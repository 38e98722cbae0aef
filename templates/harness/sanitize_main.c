/* Sanitizer runner for {{ prefix }} (tinyaot/toolchain/sanitize.py): samples of {{ PREFIX }}_INPUT_SIZE int8
   values from argv[1], one output of {{ PREFIX }}_OUTPUT_SIZE per sample to argv[2]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "{{ header }}"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fputs("usage: runner INPUT.bin OUTPUT.bin\n", stderr);
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    FILE *out = fopen(argv[2], "wb");
    if (in == NULL || out == NULL) {
        perror("runner");
        return 2;
    }
    long n;
    for (n = 0;; n++) {
        /* exact sizes: ASan's redzones start at the first byte past each buffer */
        int8_t *x = malloc({{ PREFIX }}_INPUT_SIZE);
        int8_t *y0 = malloc({{ PREFIX }}_OUTPUT_SIZE);
        int8_t *y1 = malloc({{ PREFIX }}_OUTPUT_SIZE);
        if (x == NULL || y0 == NULL || y1 == NULL) {
            fputs("runner: out of memory\n", stderr);
            return 2;
        }
        const size_t got = fread(x, 1, {{ PREFIX }}_INPUT_SIZE, in);
        if (got == 0) {
            free(x);
            free(y0);
            free(y1);
            break;
        }
        if (got != {{ PREFIX }}_INPUT_SIZE) {
            fprintf(stderr, "runner: sample %ld is truncated\n", n);
            return 2;
        }
        memset({{ prefix }}_arena, 0x00, {{ PREFIX }}_ARENA_SIZE);
        int status = {{ prefix }}_invoke(x, y0);
        if (status == 0) {
            memset({{ prefix }}_arena, 0xFF, {{ PREFIX }}_ARENA_SIZE);
            status = {{ prefix }}_invoke(x, y1);
        }
        if (status != 0) {
            fprintf(stderr, "runner: sample %ld: invoke returned %d\n", n, status);
            return 3;
        }
        if (memcmp(y0, y1, {{ PREFIX }}_OUTPUT_SIZE) != 0) {
            fprintf(stderr, "runner: sample %ld: the output depends on the arena's previous contents\n", n);
            return 4;
        }
        if (fwrite(y0, 1, {{ PREFIX }}_OUTPUT_SIZE, out) != {{ PREFIX }}_OUTPUT_SIZE) {
            perror("runner");
            return 2;
        }
        free(x);
        free(y0);
        free(y1);
    }
    fclose(in);
    return fclose(out) == 0 ? 0 : 2;
}
