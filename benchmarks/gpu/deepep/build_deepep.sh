#!/usr/bin/env bash
# Build DeepEP from a source tarball (pack_deepep.sh) on a GPU machine without network, the way SGLang
# 0.5.17's image builds it (same commit, same two source edits), but for Hopper only (TORCH_CUDA_ARCH_LIST=9.0).
#
# Usage (repository root): bash benchmarks/gpu/deepep/build_deepep.sh SRC_TARBALL OUTDIR
# Environment (defaults): PYTHON=python3  DEEPEP_WORK=/tmp/deepep-build  DEEPEP_SITE=/tmp/deepep-site
#   BUILD_TIMEOUT_S=420  MAX_JOBS=16  CUDA_HOME (else DEFAULT_CUDA_HOME=/usr/local/cuda, else where nvcc on PATH
#   says it lives)
#   NVSHMEM_DIR (else the installed nvidia.nvshmem package)
#   REUSE_WORK=1: keep DEEPEP_WORK from an earlier run on the same machine when it was unpacked and patched
#   from the same tarball (ninja then rebuilds only what is missing, after a run stopped by its timeout)
# Writes to OUTDIR: build.log (everything the build printed), build.json (outcome, step times, versions,
# the import check) and, when built, deepep-site.tar.gz (the installed package, to carry to a later call).
# Exits 0 whatever the build did (2 only for wrong usage): the outcome is build.json's "status", one of
# built | no_nvcc | no_torch | no_setuptools | no_nvshmem | unpack_failed | no_ibverbs_headers | patch_failed | build_failed |
# build_timeout | import_failed.
set -u
if [ $# -ne 2 ]; then echo "usage: build_deepep.sh SRC_TARBALL OUTDIR" >&2; exit 2; fi
SRC_TARBALL=$1; OUTDIR=$2
PY=${PYTHON:-python3}
case $PY in */*) PY=$(cd "$(dirname "$PY")" 2>/dev/null && pwd)/$(basename "$PY") ;; esac   # the build cds
WORK=${DEEPEP_WORK:-/tmp/deepep-build}
SITE=${DEEPEP_SITE:-/tmp/deepep-site}
BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-420}
JOBS=${MAX_JOBS:-16}
SITE_TAR_MAX_BYTES=$((15 * 1024 * 1024))   # a file coming back from the machine may be at most 16 MiB
# NVLink multicast stays off in every process started from here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$OUTDIR" || { echo "build_deepep.sh: cannot make $OUTDIR" >&2; exit 2; }
OUTDIR=$(cd "$OUTDIR" && pwd)
case $SRC_TARBALL in /*) ;; *) SRC_TARBALL=$PWD/$SRC_TARBALL ;; esac
LOG=$OUTDIR/build.log
: > "$LOG"
FACTS=()   # "key<TAB>value" lines, written as build.json by finish()

log() { echo "[$(date -u +%T) +${SECONDS}s] $*" | tee -a "$LOG"; }
fact() { FACTS+=("$1"$'\t'"$2"); }
json_str() {  # a JSON string literal of $1
  local s=$1
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\n'/\\n}; s=${s//$'\r'/}; s=${s//$'\t'/\\t}
  printf '"%s"' "$s"
}
finish() {  # finish STATUS REASON: write build.json and stop with 0
  fact status "$1"; fact reason "$2"; fact total_s "$SECONDS"
  log "status: $1${2:+ ($2)}"
  {
    echo "{"
    local i=0 n=${#FACTS[@]} line key val
    for line in "${FACTS[@]}"; do
      i=$((i + 1)); key=${line%%$'\t'*}; val=${line#*$'\t'}
      if [[ $key == *_json ]]; then printf '  %s: %s' "$(json_str "${key%_json}")" "$val"
      else printf '  %s: %s' "$(json_str "$key")" "$(json_str "$val")"; fi
      [ $i -lt $n ] && echo "," || echo
    done
    echo "}"
  } > "$OUTDIR/build.json"
  exit 0
}
step() {  # step NAME SECONDS_AT_START: record how long a step took
  fact "${1}_s" "$((SECONDS - $2))"
}

log "build_deepep.sh: tarball $SRC_TARBALL, work $WORK, site $SITE, MAX_JOBS=$JOBS, timeout ${BUILD_TIMEOUT_S}s"
fact tarball "$SRC_TARBALL"; fact site "$SITE"; fact max_jobs "$JOBS"; fact build_timeout_s "$BUILD_TIMEOUT_S"
fact host_cpus "$(nproc 2>/dev/null || echo '?')"
fact gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# 1. CUDA's compiler. CUDA_HOME, when set, is trusted as given (no fallback past it).
if [ -n "${CUDA_HOME:-}" ]; then
  NVCC=$CUDA_HOME/bin/nvcc
elif [ -x "${DEFAULT_CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
  CUDA_HOME=${DEFAULT_CUDA_HOME:-/usr/local/cuda}; NVCC=$CUDA_HOME/bin/nvcc
elif command -v nvcc >/dev/null 2>&1; then
  NVCC=$(command -v nvcc)
  top=$("$NVCC" --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -1)
  CUDA_HOME=$(cd "${top:-$(dirname "$NVCC")/..}" 2>/dev/null && pwd -P)
else
  NVCC=""
fi
if [ -z "$NVCC" ] || ! "$NVCC" --version >> "$LOG" 2>&1; then
  fact nvcc "${NVCC:-not on PATH, none in ${DEFAULT_CUDA_HOME:-/usr/local/cuda}}"
  finish no_nvcc "no working nvcc (CUDA_HOME=${CUDA_HOME:-unset})"
fi
export CUDA_HOME
nvcc_release=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p' | head -1)
fact nvcc "$NVCC"; fact cuda_home "$CUDA_HOME"; fact nvcc_release "$nvcc_release"
log "nvcc $NVCC (release $nvcc_release), CUDA_HOME=$CUDA_HOME"

# 2. torch, the one DeepEP's extension is built against (no build isolation: the installed one).
torch_facts=$("$PY" -c 'import torch, sys; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), sys.version.split()[0])' 2>>"$LOG")
if [ -z "$torch_facts" ]; then
  fact python "$("$PY" --version 2>&1)"
  finish no_torch "$PY cannot import torch"
fi
read -r torch_version torch_cuda cuda_available py_version <<< "$torch_facts"
fact torch "$torch_version"; fact torch_cuda "$torch_cuda"; fact cuda_available "$cuda_available"; fact python "$py_version"
log "python $py_version, torch $torch_version (CUDA $torch_cuda), GPU visible: $cuda_available"
# setuptools builds it (no isolation: the installed one); without ninja torch compiles one file at a time.
setuptools_version=$("$PY" -c 'import setuptools; print(setuptools.__version__)' 2>>"$LOG")
[ -n "$setuptools_version" ] || finish no_setuptools "$PY cannot import setuptools"
ninja_version=$("$PY" -c 'from torch.utils.cpp_extension import is_ninja_available as a; import subprocess; print(subprocess.check_output(["ninja", "--version"], text=True).strip() if a() else "none")' 2>>"$LOG")
fact setuptools "$setuptools_version"; fact ninja "${ninja_version:-none}"
log "setuptools $setuptools_version, ninja ${ninja_version:-none}"

# 3. NVSHMEM: NVSHMEM_DIR as given, else the nvidia.nvshmem package (how DeepEP's setup.py looks for it).
if [ -z "${NVSHMEM_DIR:-}" ]; then
  NVSHMEM_DIR=$("$PY" -c 'import importlib.util as u; s = u.find_spec("nvidia.nvshmem"); print(list(s.submodule_search_locations)[0])' 2>>"$LOG")
fi
nvshmem_pkg=$("$PY" -c '
import importlib.metadata as m
for name in ("nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12"):
    try:
        print(name, m.version(name)); break
    except m.PackageNotFoundError:
        pass' 2>>"$LOG")
fact nvshmem_dir "${NVSHMEM_DIR:-}"; fact nvshmem_package "${nvshmem_pkg:-none}"
missing=""
for f in include/nvshmem.h lib/libnvshmem_device.a; do [ -e "${NVSHMEM_DIR:-/nonexistent}/$f" ] || missing="$missing $f"; done
ls "${NVSHMEM_DIR:-/nonexistent}"/lib/libnvshmem_host.so* >/dev/null 2>&1 || missing="$missing lib/libnvshmem_host.so*"
if [ -z "${NVSHMEM_DIR:-}" ] || [ -n "$missing" ]; then
  finish no_nvshmem "NVSHMEM_DIR='${NVSHMEM_DIR:-}' lacks:${missing:- the directory}"
fi
# The nvidia-nvshmem wheel ships libnvshmem_host.so.3 only, and DeepEP links -l:libnvshmem_host.so
# (SGLang's image adds the link in the package). A shadow directory of links adds it without writing
# into the image's packages; DeepEP's rpath then points there.
if [ ! -e "$NVSHMEM_DIR/lib/libnvshmem_host.so" ]; then
  host_so=$(ls "$NVSHMEM_DIR"/lib/libnvshmem_host.so.* | head -1)
  shadow=/tmp/nvshmem-shadow; rm -rf "$shadow"; mkdir -p "$shadow/lib"
  ln -s "$NVSHMEM_DIR/include" "$shadow/include"
  for f in "$NVSHMEM_DIR"/lib/*; do ln -s "$f" "$shadow/lib/$(basename "$f")"; done
  ln -s "$host_so" "$shadow/lib/libnvshmem_host.so"
  log "NVSHMEM: libnvshmem_host.so linked to $(basename "$host_so") in $shadow"
  fact nvshmem_shadow "$shadow"
  NVSHMEM_DIR=$shadow
fi
export NVSHMEM_DIR
log "NVSHMEM $NVSHMEM_DIR (${nvshmem_pkg:-package not found})"

# 4. Unpack (or keep the tree an earlier run unpacked and patched from this same tarball).
t=$SECONDS
tar_sum=$(sha256sum "$SRC_TARBALL" 2>/dev/null | cut -c1-64)
if [ "${REUSE_WORK:-0}" = 1 ] && [ -n "$tar_sum" ] && [ "$(cat "$WORK/DeepEP/.patched" 2>/dev/null)" = "$tar_sum" ]; then
  reused=1; log "reusing $WORK (same tarball, already patched)"
else
  reused=0
  rm -rf "$WORK" && mkdir -p "$WORK" && tar -xzf "$SRC_TARBALL" -C "$WORK" 2>>"$LOG" && [ -f "$WORK/DeepEP/setup.py" ] \
    || finish unpack_failed "cannot unpack $SRC_TARBALL into $WORK"
fi
fact reused_work "$reused"
step unpack "$t"
deepep_commit=$(cat "$WORK/DeepEP/DEEPEP_COMMIT" 2>/dev/null || echo unknown)
fact deepep_commit "$deepep_commit"
log "DeepEP $deepep_commit"

# 5. The edits SGLang's image makes before building: longer CPU/GPU timeouts, and CUDA 13's CCCL headers
#    (SGLang's image installs rdma-core's headers with apt; here they may come in the tarball).
cd "$WORK/DeepEP" || finish unpack_failed "no $WORK/DeepEP"
if [ "$reused" = 0 ]; then
cfg=csrc/kernels/configs.cuh
sed -i 's/#define NUM_CPU_TIMEOUT_SECS 100$/#define NUM_CPU_TIMEOUT_SECS 1000/' "$cfg"
sed -i 's/#define NUM_TIMEOUT_CYCLES 200000000000ull /#define NUM_TIMEOUT_CYCLES 2000000000000ull /' "$cfg"
grep -q '^#define NUM_CPU_TIMEOUT_SECS 1000$' "$cfg" && grep -q '^#define NUM_TIMEOUT_CYCLES 2000000000000ull ' "$cfg" \
  || finish patch_failed "timeouts in $cfg not found where expected"
patches="timeouts x10"
extra_includes=()
[ "${nvcc_release%%.*}" = "13" ] && extra_includes+=("$CUDA_HOME/include/cccl")
# rdma-core's headers: DeepEP's kernels include <infiniband/mlx5dv.h>; the tarball may bring them (sys-include/).
if echo '#include <infiniband/mlx5dv.h>' | g++ -E -x c++ - >/dev/null 2>&1; then
  fact ibverbs_headers system
elif [ -f "$WORK/DeepEP/sys-include/infiniband/mlx5dv.h" ]; then
  extra_includes+=("$WORK/DeepEP/sys-include")
  fact ibverbs_headers "carried: $(cat "$WORK/DeepEP/sys-include/FROM" 2>/dev/null)"
else
  finish no_ibverbs_headers "no <infiniband/mlx5dv.h> on the system and none in the tarball (pack with LIBIBVERBS_DEV_DEB)"
fi
if [ ${#extra_includes[@]} -gt 0 ]; then
  "$PY" - "${extra_includes[@]}" >>"$LOG" 2>&1 <<'PY' || finish patch_failed "editing setup.py's include_dirs failed (see build.log)"
import sys
anchor = "    include_dirs = ['csrc/']\n"
text = open("setup.py").read()
if text.count(anchor) != 1:
    sys.exit(f"setup.py: {text.count(anchor)} copies of {anchor!r}")
added = "".join(f"    include_dirs.append({d!r})\n" for d in sys.argv[1:])
open("setup.py", "w").write(text.replace(anchor, anchor + added))
print("setup.py: added include dirs", sys.argv[1:])
PY
  patches="$patches, include dirs: ${extra_includes[*]}"
fi
echo "$tar_sum" > .patched
echo "$patches" > .patches
fi
patches=$(cat .patches)
fact patches "$patches"
log "patched: $patches"

# 6. Build and install into SITE.
unset DISABLE_SM90_FEATURES DISABLE_AGGRESSIVE_PTX_INSTRS
export TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=$JOBS
rm -rf "$SITE"
log "pip install --no-build-isolation --no-deps --target $SITE . (TORCH_CUDA_ARCH_LIST=9.0)"
t=$SECONDS
timeout -k 10 "$BUILD_TIMEOUT_S" "$PY" -m pip install --no-build-isolation --no-deps --no-index --no-cache-dir \
    --disable-pip-version-check -v --target "$SITE" . >> "$LOG" 2>&1
rc=$?
step build "$t"; fact build_rc "$rc"
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then finish build_timeout "stopped after ${BUILD_TIMEOUT_S}s"; fi
[ $rc -eq 0 ] || finish build_failed "pip exited $rc (see build.log)"
so=$(find "$SITE" -maxdepth 1 -name 'deep_ep_cpp*.so' | head -1)
[ -n "$so" ] || finish build_failed "pip succeeded but $SITE has no deep_ep_cpp*.so"
fact extension "$(basename "$so")"; fact extension_bytes "$(stat -c %s "$so")"
{ echo "--- ldd $so"; ldd "$so"; } >> "$LOG" 2>&1
unresolved=$(ldd "$so" 2>/dev/null | grep -c 'not found')
fact ldd_not_found "$unresolved"
log "built $(basename "$so") ($(stat -c %s "$so") bytes), $unresolved libraries not found by ldd (torch's resolve on import)"

# 7. Import it, outside the source tree (its deep_ep/ has no extension and would shadow the installed one).
t=$SECONDS
import_json=$(cd / && PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$SITE" 2>>"$LOG" <<'PY'
import importlib.metadata as md, inspect, json, sys
import torch
import deep_ep
dists = [d for d in md.distributions(path=[sys.argv[1]]) if d.metadata["Name"].replace("-", "_").lower() == "deep_ep"]
buf = deep_ep.Buffer
print(json.dumps({
    "module": deep_ep.__file__,
    "version": dists[0].version if dists else None,
    "buffer_methods": sorted(n for n, _ in inspect.getmembers(buf, callable) if not n.startswith("_")),
    "buffer_init": str(inspect.signature(buf.__init__)),
    "is_sm90_compiled": bool(buf.is_sm90_compiled()),
    "has_config": hasattr(deep_ep, "Config"),
    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
}))
PY
)
rc=$?
step import "$t"
if [ $rc -ne 0 ] || [ -z "$import_json" ]; then finish import_failed "import deep_ep failed (see build.log)"; fi
fact import_json "$import_json"
log "import: $import_json"

# 8. The installed package, small enough to come back and be carried to the two-GPU machine.
tar -czf "$OUTDIR/deepep-site.tar.gz" -C "$(dirname "$SITE")" "$(basename "$SITE")"
bytes=$(stat -c %s "$OUTDIR/deepep-site.tar.gz")
if [ "$bytes" -gt "$SITE_TAR_MAX_BYTES" ]; then
  rm -f "$OUTDIR/deepep-site.tar.gz"; fact site_tarball "left out: $bytes bytes"
else
  fact site_tarball "deepep-site.tar.gz $bytes bytes (unpack into $(dirname "$SITE"))"
fi
finish built ""
