#!/usr/bin/env bash
# The full "installable anywhere" check, as a new user meets it: build a wheel from this checkout, install it with
# its dependencies from the package index into a fresh virtual environment in a temporary folder, then, from a
# folder outside the checkout, list the boards and deploy the shipped keyword-spotting model for the STM32F405,
# verified under QEMU. (tests/packaging/test_wheel_install.py runs the same with the dependencies borrowed from
# .venv, so that the suite needs no network.) Exits non-zero when any step fails.
#   bash ci/fresh_install.sh [PYTHON]      PYTHON: the interpreter for the fresh venv (default python3)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-python3}"
work="$(mktemp -d -t tinyaot-fresh-XXXXXX)"
trap 'rm -rf "$work"' EXIT

# build from a copy: an in-tree build would reuse a stale build/ folder
mkdir "$work/src"
(cd "$repo" && tar -cf - --exclude=__pycache__ --exclude='*.pyc' --exclude='*.so' --exclude='*.o' --exclude='*.elf' \
  tinyaot templates boards setup.py pyproject.toml README.md) | tar -xf - -C "$work/src"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip wheel -q --no-deps -w "$work/dist" "$work/src"
start=$(date +%s)
"$work/venv/bin/python" -m pip install -q "$work"/dist/tinyaot-*.whl
echo "fresh_install: wheel and its dependencies installed in $(( $(date +%s) - start )) s"

mkdir "$work/elsewhere"
cp "$repo/examples/kws_dscnn.onnx" "$work/elsewhere/model.onnx"
cp "$repo/calibration_data/kws_dscnn.npz" "$work/elsewhere/cal.npz"
cd "$work/elsewhere"
export TINYAOT_CACHE="$work/cache"
unset PYTHONPATH
where="$("$work/venv/bin/python" -c 'import tinyaot; print(tinyaot.__file__)')"
case "$where" in
  "$work/venv/"*) echo "fresh_install: tinyaot imported from $where" ;;
  *) echo "fresh_install: FAILED: tinyaot imported from $where, not from the fresh venv" >&2; exit 1 ;;
esac
"$work/venv/bin/tinyaot" boards
"$work/venv/bin/tinyaot" deploy model.onnx --board stm32 --calibration cal.npz --out out
"$work/venv/bin/python" - <<'EOF'
import json, sys
v = json.load(open("out/report.json"))["verify"]
ok = v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0 and v["max_abs_diff_vs_onnxruntime"] <= 1
print("fresh_install:", "verified" if ok else f"FAILED: {v}")
sys.exit(0 if ok else 1)
EOF
