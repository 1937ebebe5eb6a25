#!/usr/bin/env bash
# Build ray.tar.xz: Ray with its `default` extra (the dashboard's job server, which `ray job submit`
# talks to) and the harness's own needs, for the GPU machine's Python 3.12, slimmed to fit one
# 64 MiB transfer beside the repository. SGLang's site (../sglang_real/pack_site.sh) already carries
# pydantic, pydantic-core and msgspec: they are left out here so one version of each travels.
# Usage: bash pack_ray.sh OUT_DIR   (needs network and pip; writes OUT_DIR/ray.tar.xz)
set -euo pipefail
OUT=$(realpath "$1"); WORK=$(mktemp -d)
mkdir -p "$WORK/dl" "$WORK/raysite" "$OUT"
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 --platform any \
  -d "$WORK/dl" "ray[default]==2.60.0" "rich==15.0.0" "aiohttp==3.14.5" "psutil==7.2.2"
for w in "$WORK"/dl/*.whl; do
  case "$(basename "$w")" in
    pydantic-*|pydantic_core-*|annotated_types-*|typing_inspection-*|msgspec-*) continue ;;
    ray-*) unzip -q -o "$w" -d "$WORK/raysite" -x 'ray/jars/*' 'ray/rllib/*' '*.js.map' ;;
    *) unzip -q -o "$w" -d "$WORK/raysite" ;;
  esac
done
find "$WORK/raysite" -name __pycache__ -prune -exec rm -rf {} +
tar cf - -C "$WORK" raysite | xz -T0 -6 > "$OUT/ray.tar.xz"
ls -la "$OUT/ray.tar.xz"
rm -rf "$WORK"
