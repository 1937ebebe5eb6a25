#!/usr/bin/env bash
# Pack DeepEP's source at the commit SGLang 0.5.17's Docker image builds, for a GPU machine without network.
# Usage: bash pack_deepep.sh DEEPEP_GIT_DIR OUTDIR [LIBIBVERBS_DEV_DEB]
#   DEEPEP_GIT_DIR:     a clone (or bare mirror) of https://github.com/deepseek-ai/DeepEP holding the commit
#   OUTDIR:             where deepep-src-<short>.tar.gz is written (made if missing; an existing one is kept)
#   LIBIBVERBS_DEV_DEB: rdma-core's header package (`apt-get download libibverbs-dev`); its headers go in
#                       DeepEP/sys-include/, for a machine without them: DeepEP's kernels include
#                       <infiniband/mlx5dv.h> (IBGDA work-queue layouts) even where no NIC is used.
# The tarball holds DeepEP/ (figures/ left out: images only) and DeepEP/DEEPEP_COMMIT naming the commit,
# since the build there has no .git to read it from.
set -euo pipefail
DEEPEP_COMMIT=${DEEPEP_COMMIT:-9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee}   # DeepEP v1.2.1; see README.md
MAX_BYTES=$((64 * 1024 * 1024))
if [ $# -lt 2 ] || [ $# -gt 3 ]; then echo "usage: pack_deepep.sh DEEPEP_GIT_DIR OUTDIR [LIBIBVERBS_DEV_DEB]" >&2; exit 2; fi
SRC=$1; OUTDIR=$2; DEB=${3:-}
if [ -n "$DEB" ] && [ ! -f "$DEB" ]; then echo "pack_deepep.sh: no file $DEB" >&2; exit 2; fi
git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 || { echo "pack_deepep.sh: $SRC is not a git repository" >&2; exit 2; }
git -C "$SRC" cat-file -e "${DEEPEP_COMMIT}^{commit}" 2>/dev/null \
  || { echo "pack_deepep.sh: commit $DEEPEP_COMMIT not in $SRC (fetch it first)" >&2; exit 2; }
short=${DEEPEP_COMMIT:0:7}
mkdir -p "$OUTDIR"
out="$OUTDIR/deepep-src-$short.tar.gz"
if [ -e "$out" ]; then echo "pack_deepep.sh: $out exists, left as it is" >&2; exit 2; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
git -C "$SRC" archive --format=tar --prefix=DeepEP/ "$DEEPEP_COMMIT" | tar -x -C "$tmp"
rm -rf "$tmp/DeepEP/figures"
echo "$DEEPEP_COMMIT" > "$tmp/DeepEP/DEEPEP_COMMIT"
if [ -n "$DEB" ]; then
  dpkg-deb -x "$DEB" "$tmp/deb"
  [ -f "$tmp/deb/usr/include/infiniband/mlx5dv.h" ] || { echo "pack_deepep.sh: $DEB has no infiniband/mlx5dv.h" >&2; exit 2; }
  mkdir -p "$tmp/DeepEP/sys-include"
  cp -r "$tmp/deb/usr/include/infiniband" "$tmp/DeepEP/sys-include/"
  basename "$DEB" > "$tmp/DeepEP/sys-include/FROM"
fi
tar -czf "$tmp/pack.tar.gz" -C "$tmp" DeepEP
bytes=$(stat -c %s "$tmp/pack.tar.gz")
if [ "$bytes" -ge "$MAX_BYTES" ]; then echo "pack_deepep.sh: tarball is $bytes bytes, over 64 MiB" >&2; exit 1; fi
mv "$tmp/pack.tar.gz" "$out"
echo "$out $bytes bytes, DeepEP $DEEPEP_COMMIT"
