"""Fixtures for the kernel tests: a tiny bare-metal Cortex-M test harness run under qemu-system-arm.

The kernels' DSP path (SXTB16/SMLAD, compiled only when __ARM_FEATURE_DSP is defined) never runs on the host, so it
is checked on emulated cores: a test writes a C `main` that runs kernels and prints results through Arm
semihosting, and `arm_run(cpu, main_source)` links it with the kernels, a minimal startup (vector table, .data copy,
.bss clear, semihosting exit) and a linker script for the QEMU board of that core, runs it and returns its output.
This harness only serves these tests; the product's own firmware harness lives elsewhere.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ARM_GCC = shutil.which("arm-none-eabi-gcc")
QEMU = shutil.which("qemu-system-arm")


@dataclass(frozen=True)
class Board:
    machine: str
    flash_origin: int
    flash_kib: int
    ram_origin: int
    ram_kib: int


# One QEMU machine per core; the memory used is a prefix of what each board really has at those addresses.
BOARDS = {
    "cortex-m0": Board("microbit", 0x00000000, 256, 0x20000000, 16),
    "cortex-m3": Board("mps2-an385", 0x00000000, 4096, 0x20000000, 4096),
    "cortex-m4": Board("mps2-an386", 0x00000000, 4096, 0x20000000, 4096),
    "cortex-m7": Board("mps2-an500", 0x00000000, 4096, 0x20000000, 4096),
    "cortex-m55": Board("mps3-an547", 0x00000000, 512, 0x20000000, 512),
}

STARTUP_C = r"""
#include <stddef.h>
#include <stdint.h>

extern uint32_t __stack_top, __data_load, __data_start, __data_end, __bss_start, __bss_end;
int main(void);
void harness_reset(void);
void harness_fault(void);

__attribute__((section(".vectors"), used)) static void *const vectors[16] = {
    (void *)&__stack_top, (void *)harness_reset, (void *)harness_fault, (void *)harness_fault,
    (void *)harness_fault, (void *)harness_fault, (void *)harness_fault, 0, 0, 0, 0,
    (void *)harness_fault, (void *)harness_fault, 0, (void *)harness_fault, (void *)harness_fault,
};

/* Arm semihosting: operation in r0, argument in r1, BKPT 0xAB traps to the debugger (QEMU -semihosting). */
static int semihost(int op, const void *arg)
{
    register int r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void harness_puts(const char *s) { semihost(0x04, s); } /* SYS_WRITE0 */

void harness_exit(int code)
{
    /* SYS_EXIT: ADP_Stopped_ApplicationExit exits QEMU with 0, ADP_Stopped_RunTimeErrorUnknown with 1 */
    semihost(0x18, (const void *)(uintptr_t)(code == 0 ? 0x20026u : 0x20023u));
    for (;;) {
    }
}

void harness_fault(void)
{
    harness_puts("HARNESS FAULT\n");
    harness_exit(1);
}

void harness_reset(void)
{
    uint32_t *src = &__data_load;
    uint32_t *dst = &__data_start;
    while (dst < &__data_end) {
        *dst++ = *src++;
    }
    for (dst = &__bss_start; dst < &__bss_end; dst++) {
        *dst = 0;
    }
    harness_exit(main());
}

/* The kernels need no C library; the compiler may still emit calls to these. */
void *memcpy(void *d, const void *s, size_t n)
{
    uint8_t *dp = d;
    const uint8_t *sp = s;
    while (n--) {
        *dp++ = *sp++;
    }
    return d;
}

void *memset(void *d, int v, size_t n)
{
    uint8_t *dp = d;
    while (n--) {
        *dp++ = (uint8_t)v;
    }
    return d;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const uint8_t *x = a;
    const uint8_t *y = b;
    for (; n; n--, x++, y++) {
        if (*x != *y) {
            return *x < *y ? -1 : 1;
        }
    }
    return 0;
}
"""

LINKER_SCRIPT = """
MEMORY
{{
  FLASH (rx) : ORIGIN = {flash_origin:#010x}, LENGTH = {flash_kib}K
  RAM (rwx)  : ORIGIN = {ram_origin:#010x}, LENGTH = {ram_kib}K
}}
SECTIONS
{{
  .text : {{ KEEP(*(.vectors)) *(.text*) *(.rodata*) . = ALIGN(4); }} > FLASH
  .data : {{ __data_start = .; *(.data*) . = ALIGN(4); __data_end = .; }} > RAM AT > FLASH
  __data_load = LOADADDR(.data);
  .bss (NOLOAD) : {{ __bss_start = .; *(.bss*) *(COMMON) . = ALIGN(4); __bss_end = .; }} > RAM
  __stack_top = ORIGIN(RAM) + LENGTH(RAM);
  /DISCARD/ : {{ *(.ARM.exidx*) *(.ARM.extab*) }}
}}
"""


class ArmRunner:
    """Builds and runs the test firmware. The kernel sources are compiled once per session for each core, flags and
    text (the source's and every header's beside it or in the include folders), and the objects linked into each
    firmware that lists them: without -flto gcc compiles every file of a command on its own, so the firmware is the
    one a single gcc command over all files gives, and several tests' firmwares share one compile of the kernels."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self._objects: dict[str, Path] = {}

    def _flags(self, cpu: str, include_dirs: list[Path], extra_flags: tuple[str, ...]) -> list[str]:
        return [f"-mcpu={cpu}", "-mthumb", "-O2", "-std=c99", "-ffreestanding", "-ffunction-sections",
                "-fdata-sections", *[f"-I{p}" for p in include_dirs], *extra_flags]

    def _object(self, cpu: str, source: Path, include_dirs: list[Path], extra_flags: tuple[str, ...]) -> Path:
        flags = self._flags(cpu, include_dirs, extra_flags)
        h = hashlib.sha256(json.dumps([flags, str(source)]).encode() + b"\0" + source.read_bytes())
        for folder in dict.fromkeys([source.parent, *map(Path, include_dirs)]):
            for header in sorted(folder.glob("*.h")) + sorted(folder.glob("*.inc")):
                h.update(str(header).encode() + b"\0" + header.read_bytes() + b"\0")
        key = h.hexdigest()
        if key not in self._objects:
            obj = self.workdir / "objects" / f"{source.stem}-{key[:16]}.o"
            obj.parent.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run([ARM_GCC, *flags, "-c", str(source), "-o", str(obj)], capture_output=True,
                                  text=True)
            if proc.returncode != 0:
                raise AssertionError(f"arm build failed for {cpu}:\n{proc.stderr[-4000:]}")
            self._objects[key] = obj
        return self._objects[key]

    def build(self, cpu: str, name: str, main_source: str, sources: list[Path], include_dirs: list[Path],
              extra_flags: tuple[str, ...] = ()) -> Path:
        board = BOARDS[cpu]
        d = self.workdir / f"{name}-{cpu}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "startup.c").write_text(STARTUP_C)
        (d / "main.c").write_text(main_source)
        (d / "link.ld").write_text(LINKER_SCRIPT.format(**board.__dict__))
        elf = d / "fw.elf"
        objects = [self._object(cpu, Path(s), include_dirs, extra_flags) for s in sources]
        cmd = [ARM_GCC, *self._flags(cpu, include_dirs, extra_flags), "-nostdlib", "-Wl,--gc-sections",
               "-T", str(d / "link.ld"), str(d / "startup.c"), str(d / "main.c"), *map(str, objects), "-lgcc",
               "-o", str(elf)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise AssertionError(f"arm build failed for {cpu}:\n{proc.stderr[-4000:]}")
        return elf

    def run(self, cpu: str, elf: Path, timeout: float = 60.0) -> tuple[int, str]:
        board = BOARDS[cpu]
        cmd = [QEMU, "-M", board.machine, "-cpu", cpu, "-nographic", "-monitor", "none", "-serial", "none",
               "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def arm_runner(tmp_path_factory) -> ArmRunner:
    if ARM_GCC is None or QEMU is None:
        pytest.skip("arm-none-eabi-gcc or qemu-system-arm is not installed: the DSP path cannot be run")
    return ArmRunner(tmp_path_factory.mktemp("arm"))
