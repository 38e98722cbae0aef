#!/usr/bin/env bash
# One command from a fresh Debian/Ubuntu machine to a verified model:
#   installs the Arm toolchain and QEMU through apt when they are missing, makes .venv with tinyaot in it,
#   then compiles the shipped keyword-spotting model for the STM32F405 and verifies it under QEMU.
# --deps-only stops after the installs (what .ci/run uses).
set -euo pipefail
cd "$(dirname "$0")"

need_apt=()
command -v arm-none-eabi-gcc >/dev/null 2>&1 || need_apt+=(gcc-arm-none-eabi libnewlib-arm-none-eabi)
[ -e /usr/lib/arm-none-eabi/newlib/libc.a ] || [ -e /usr/lib/arm-none-eabi/lib/libc.a ] \
  || need_apt+=(libnewlib-arm-none-eabi)
command -v qemu-system-arm >/dev/null 2>&1 || need_apt+=(qemu-system-arm)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)  # examples/two_models and its test build with CMake
command -v clang >/dev/null 2>&1 || need_apt+=(clang)  # the generated C is also held to Clang (--target=arm-none-eabi)
command -v make >/dev/null 2>&1 || need_apt+=(make)    # CMake's default generator; the generated Makefile
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# the sweep's report.html is checked in a real headless browser (playwright drives this chromium, not its own)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${need_apt[*]} with apt"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'

if [ "${1:-}" = "--deps-only" ]; then
  exit 0
fi

.venv/bin/tinyaot deploy examples/kws_dscnn.onnx --board stm32 \
  --calibration calibration_data/kws_dscnn.npz --out out/kws_dscnn_stm32
echo "setup: done. The generated C is in out/kws_dscnn_stm32 (report.md tells what it costs)."
