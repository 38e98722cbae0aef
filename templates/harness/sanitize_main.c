/* Sanitizer runner for {{ prefix }} (tinyaot/toolchain/sanitize.py): samples from argv[1] (each one every input's
   int8 values back to back, in invoke's order), every output of each sample to argv[2] (in invoke's order). Each
   input and output gets its own heap buffer of exactly its size, so ASan sees a read or write past any of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "{{ header }}"
{% macro free_all(indent) %}
{% for p in inputs %}
{{ indent }}free(x{{ loop.index0 }});
{% endfor %}
{% for p in outputs %}
{{ indent }}free(y{{ loop.index0 }}_a);
{{ indent }}free(y{{ loop.index0 }}_b);
{% endfor %}
{% endmacro %}

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
{% for p in inputs %}
        int8_t *x{{ loop.index0 }} = malloc({{ PREFIX }}_{{ p }}_SIZE);
{% endfor %}
{% for p in outputs %}
        int8_t *y{{ loop.index0 }}_a = malloc({{ PREFIX }}_{{ p }}_SIZE);
        int8_t *y{{ loop.index0 }}_b = malloc({{ PREFIX }}_{{ p }}_SIZE);
{% endfor %}
        if ({% for p in inputs %}x{{ loop.index0 }} == NULL || {% endfor %}{% for p in outputs %}y{{ loop.index0 }}_a == NULL || y{{ loop.index0 }}_b == NULL{{ " || " if not loop.last }}{% endfor %}) {
            fputs("runner: out of memory\n", stderr);
            return 2;
        }
        size_t got = fread(x0, 1, {{ PREFIX }}_{{ inputs[0] }}_SIZE, in);
        if (got == 0) {
{{ free_all("            ")|trim("\n") }}
            break;
        }
{% for p in inputs[1:] %}
        if (got == {{ PREFIX }}_{{ inputs[loop.index0] }}_SIZE) {
            got = fread(x{{ loop.index }}, 1, {{ PREFIX }}_{{ p }}_SIZE, in);
        }
{% endfor %}
        if (got != {{ PREFIX }}_{{ inputs[-1] }}_SIZE) {
            fprintf(stderr, "runner: sample %ld is truncated\n", n);
            return 2;
        }
        memset({{ prefix }}_arena, 0x00, {{ PREFIX }}_ARENA_SIZE);
        int status = {{ prefix }}_invoke({% for p in inputs %}x{{ loop.index0 }}, {% endfor %}{% for p in outputs %}y{{ loop.index0 }}_a{{ ", " if not loop.last }}{% endfor %});
        if (status == 0) {
            memset({{ prefix }}_arena, 0xFF, {{ PREFIX }}_ARENA_SIZE);
            status = {{ prefix }}_invoke({% for p in inputs %}x{{ loop.index0 }}, {% endfor %}{% for p in outputs %}y{{ loop.index0 }}_b{{ ", " if not loop.last }}{% endfor %});
        }
        if (status != 0) {
            fprintf(stderr, "runner: sample %ld: invoke returned %d\n", n, status);
            return 3;
        }
{% for p in outputs %}
        if (memcmp(y{{ loop.index0 }}_a, y{{ loop.index0 }}_b, {{ PREFIX }}_{{ p }}_SIZE) != 0) {
            fprintf(stderr, "runner: sample %ld: the output depends on the arena's previous contents\n", n);
            return 4;
        }
        if (fwrite(y{{ loop.index0 }}_a, 1, {{ PREFIX }}_{{ p }}_SIZE, out) != {{ PREFIX }}_{{ p }}_SIZE) {
            perror("runner");
            return 2;
        }
{% endfor %}
{{ free_all("        ")|trim("\n") }}
    }
    fclose(in);
    return fclose(out) == 0 ? 0 : 2;
}
