#!/usr/bin/env bash
# CI: the Dockerfile builds and the built image works. No image registry is reachable from CI, so the
# base is made here: a Debian root file system from the Debian mirror (mmdebstrap) with python3, pip and
# torch's CPU build, imported as an image. The image is built FROM it (BASE=...) with buildah, no daemon
# (vfs storage, chroot isolation), and inside it every shipped scenario is validated and the CPU demo runs.
# The GPU base (lmsysorg/sglang) stays the Dockerfile's default for real clusters (docs/image.md).
#
#   bash .ci/image_check.sh          # as root; installs buildah and mmdebstrap with apt-get when missing
#
# The base is cached in $MOE_HARNESS_IMAGE_CACHE (default ~/.cache/moe-harness-image), keyed by its
# recipe; the build's storage is a temporary folder removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'image_check: %s\n' "$*" >&2; }

suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")  # the suite this machine's mirror serves
mirror="${MOE_HARNESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${MOE_HARNESS_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
packages="python3,python3-pip,python-is-python3,ca-certificates"
torch_pin="$(grep -E '^torch==' .ci/constraints.txt)+cpu"  # the CPU build of CI's torch
cache="${MOE_HARNESS_IMAGE_CACHE:-$HOME/.cache/moe-harness-image}"
image="localhost/moe-harness:image-check"
SECONDS=0

missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { say "needs root (mmdebstrap, buildah storage) and ${missing[*]}"; exit 1; }
  say "installing the Debian packages ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 1. The base: torch's CPU wheel (the host's pip configuration finds it, as for CI's .venv), then the root fs.
mkdir -p "$cache/wheels"
torch_wheel=$(ls "$cache"/wheels/torch-"${torch_pin#torch==}"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$torch_wheel" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$cache/wheels" "$torch_pin"
  torch_wheel=$(ls "$cache"/wheels/torch-"${torch_pin#torch==}"-*.whl | head -1)
fi
recipe="$suite $mirror $packages $(basename "$torch_wheel") $(sha256sum /etc/ssl/certs/ca-certificates.crt | cut -c1-16) v2"  # bump the version when the hooks below change
base_tar="$cache/base-$suite-$(printf '%s' "$recipe" | sha256sum | cut -c1-16).tar"
if [ ! -f "$base_tar" ]; then
  partial="${base_tar%.tar}.partial.tar"  # mmdebstrap writes a tarball for a name ending in .tar
  rm -f "$partial"
  say "making the Debian $suite base ($packages, $(basename "$torch_wheel")): $base_tar"
  # The host's CA bundle and pip's use of it: the base reaches PyPI the way this machine does.
  mmdebstrap --quiet --variant=apt --include="$packages" \
    --customize-hook='cp /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"' \
    --customize-hook='printf "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n" > "$1/etc/pip.conf"' \
    --customize-hook="mkdir -p \"\$1/tmp/wheels\" && cp '$torch_wheel' \"\$1/tmp/wheels/\"" \
    --customize-hook='chroot "$1" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root PIP_ROOT_USER_ACTION=ignore \
      sh -c "python3 -m pip install -q --no-cache-dir --break-system-packages /tmp/wheels/*.whl"' \
    --customize-hook='rm -r "$1/tmp/wheels"' \
    "$suite" "$partial" \
    "deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security_mirror $suite-security main"
  mv "$partial" "$base_tar"
  find "$cache" -maxdepth 1 -name 'base-*.tar' ! -path "$base_tar" -delete  # older recipes' bases (1 GB each)
fi
say "base ready after ${SECONDS} s"

# 2. The image, FROM the base, with buildah in a temporary storage.
work=$(mktemp -d /tmp/moe-harness-image-check.XXXXXX)
ctr=""
bah() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }
cleanup() {
  [ -z "$ctr" ] || bah rm "$ctr" >/dev/null 2>&1 || true
  bah rmi --all --force >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
base_ctr=$(bah from scratch)
bah add --quiet "$base_ctr" "$base_tar" /
bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd bash "$base_ctr"
bah commit --quiet --rm "$base_ctr" localhost/moe-harness-base:debian-$suite-cpu >/dev/null
build_start=$SECONDS
bah build --quiet --isolation chroot --build-arg BASE=localhost/moe-harness-base:debian-$suite-cpu \
  -t "$image" . >/dev/null
say "image built in $((SECONDS - build_start)) s"

# 3. Inside the image: the installed package (run from / so nothing of /opt/moe-harness is on sys.path).
ctr=$(bah from "$image")
inside() { bah run --isolation chroot --workingdir "$1" "$ctr" -- "${@:2}"; }
say "container ready after ${SECONDS} s"
for path in scenarios/*.yaml; do
  inside / moe-harness validate "$(basename "$path" .yaml)"
done
say "every shipped scenario validated after ${SECONDS} s"
demo_start=$SECONDS
inside /opt/moe-harness python harness/run.py --scenario demo --runs-dir /tmp/runs
say "demo ran in $((SECONDS - demo_start)) s; image check passed in ${SECONDS} s"
