/* tinyaot's QEMU TCG plugin: counts executed guest instructions, in total and between executions of a marker.
 *
 * Arguments (qemu-system-arm -plugin libinsn.so,out=FILE,mark=ADDR):
 *   out=FILE   where to write the counts when QEMU exits (required)
 *   mark=ADDR  guest address of the marker function's first instruction, Thumb bit cleared (optional)
 * The file holds "total <instructions>", "marks <k>" and then k lines, each the number of instructions executed
 * before that execution of the marker; consecutive differences are the per-segment counts.
 *
 * Counting is one inline 64-bit add per translation block (cheap, no callback) plus a callback only on the marker
 * instruction. The inline add happens on block entry for the whole block, so the callback subtracts the
 * instructions from the marker to the block's end: the recorded value is exact wherever the marker falls in a block.
 *
 * Debian installs no qemu-plugin.h, so the few declarations of QEMU's public plugin API (version 1, QEMU 7.2)
 * that this file uses are written out here; they are resolved against the qemu-system-arm binary at load time.
 * Build: gcc -shared -fPIC -O2 -o libinsn.so insn_plugin.c
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
struct qemu_info_t; /* passed to install; never read here, so left opaque */

enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           void (*cb)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, void (*cb)(unsigned int, void *),
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, void (*cb)(qemu_plugin_id_t, void *), void *userdata);

#define EXPORT __attribute__((visibility("default")))

EXPORT int qemu_plugin_version = 1;

/* The boards tinyaot runs have one vCPU, so one counter needs no per-CPU slots or atomics. */
static uint64_t executed;
static uint64_t mark_addr;
static int have_mark;
static char *out_path;
static uint64_t *marks;
static size_t n_marks, cap_marks;

static void on_mark(unsigned int vcpu, void *udata)
{
    (void)vcpu;
    if (n_marks == cap_marks) {
        size_t cap = cap_marks ? 2 * cap_marks : 1024;
        uint64_t *grown = realloc(marks, cap * sizeof *marks);
        if (grown == NULL) {
            return; /* the missing marks show up as a short list; the total stays right */
        }
        marks = grown;
        cap_marks = cap;
    }
    /* udata = instructions from the marker to the end of its block, already added on block entry. */
    marks[n_marks++] = executed - (uint64_t)(uintptr_t)udata;
}

static void on_tb_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    size_t n = qemu_plugin_tb_n_insns(tb);
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed, n);
    if (!have_mark) {
        return;
    }
    for (size_t i = 0; i < n; ++i) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (qemu_plugin_insn_vaddr(insn) == mark_addr) {
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark, QEMU_PLUGIN_CB_NO_REGS,
                                                   (void *)(uintptr_t)(n - i));
        }
    }
}

static void write_counts(qemu_plugin_id_t id, void *udata)
{
    FILE *fh;
    (void)id;
    (void)udata;
    fh = fopen(out_path, "w");
    if (fh == NULL) {
        fprintf(stderr, "tinyaot insn plugin: cannot write %s\n", out_path);
        return;
    }
    fprintf(fh, "total %" PRIu64 "\nmarks %zu\n", executed, n_marks);
    for (size_t i = 0; i < n_marks; ++i) {
        fprintf(fh, "%" PRIu64 "\n", marks[i]);
    }
    fclose(fh);
}

EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const struct qemu_info_t *info, int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; ++i) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = strdup(argv[i] + 4);
        } else if (strncmp(argv[i], "mark=", 5) == 0) {
            mark_addr = strtoull(argv[i] + 5, NULL, 0);
            have_mark = 1;
        } else {
            fprintf(stderr, "tinyaot insn plugin: unknown argument '%s'\n", argv[i]);
            return -1;
        }
    }
    if (out_path == NULL) {
        fprintf(stderr, "tinyaot insn plugin: missing out=FILE\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_translate);
    qemu_plugin_register_atexit_cb(id, write_counts, NULL);
    return 0;
}
