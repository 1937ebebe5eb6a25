#!/usr/bin/env bash
# Build site.tar.xz: every package of wheels.txt unpacked into site/, slimmed to fit one 64 MiB transfer.
# Usage: bash pack_site.sh OUT_DIR   (needs network and pip; writes OUT_DIR/site.tar.xz, about 49 MB)
set -euo pipefail
OUT=$(realpath "$1"); HERE=$(cd "$(dirname "$0")" && pwd); WORK=$(mktemp -d)
mkdir -p "$WORK/dl" "$WORK/site" "$OUT"
grep -v '^#' "$HERE/wheels.txt" | sed 's/#.*//' | awk 'NF' | while read -r req; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d "$WORK/dl" "$req"
done
for w in "$WORK"/dl/*.whl; do
  case "$(basename "$w")" in
    sglang_kernel-*) unzip -q -o "$w" -d "$WORK/site" -x 'sgl_kernel/flash_ops.abi3.so' 'sgl_kernel/infllm_ops*' 'sgl_kernel/sm100/*' ;;
    *) unzip -q -o "$w" -d "$WORK/site" ;;
  esac
done
# SGLang 0.5.17 pins transformers 5.12.1, whose version check wants tokenizers <= 0.23.0; the image has 0.23.2.
sed -i 's/"tokenizers": "tokenizers>=0.22.0,<=0.23.0"/"tokenizers": "tokenizers>=0.22.0"/' "$WORK/site/transformers/dependency_versions_table.py"
# The image has its own uvloop; SGLang's diffusion server is not used.
rm -rf "$WORK"/site/uvloop "$WORK"/site/uvloop-* "$WORK/site/sglang/multimodal_gen" "$WORK/site/sglang/benchmark"
find "$WORK/site" -name __pycache__ -prune -exec rm -rf {} +
tar cf - -C "$WORK" site | xz -T0 -6 > "$OUT/site.tar.xz"
ls -la "$OUT/site.tar.xz"
rm -rf "$WORK"
