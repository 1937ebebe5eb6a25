# The harness image: the harness, Ray and the harness's extras on top of a base that brings Python and
# the model stack. docs/image.md says how to build it on either base and what CI checks.
#
# BASE, the GPU base (default): the official SGLang image of the default supported release. Its tag
# equals the default row's docker_image in harness/sglang/versions.yaml (tests/test_sglang_flags.py).
# That image brings SGLang 0.5.23 with what its wheel pins: torch 2.14.1, transformers 5.19.0, DeepEP
# (sgl-deep-ep 0.1.2.post1) and DeepGEMM (sgl-deep-gemm 0.2.3.post2); this build installs none of
# them and changes no package of the base (tests/test_image_build.py reads the pins from the wheel).
#   docker build -t REGISTRY/moe-harness:sglang-v0.5.23 .
# Another supported release: its image, and plan/run with the same --sglang-version:
#   docker build --build-arg SGLANG_IMAGE=lmsysorg/sglang:v0.5.17 -t REGISTRY/moe-harness:sglang-v0.5.17 .
# Any other base needs python3 >= 3.11 with pip and torch; CI builds on a Debian root file system with
# torch's CPU build (.ci/image_check.sh):
#   buildah build --build-arg BASE=localhost/moe-harness-base:debian-bookworm-cpu -t moe-harness:cpu .
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23
ARG BASE=${SGLANG_IMAGE}
FROM ${BASE}

# Ray: the release of rayVersion in cluster/kuberay/raycluster.yaml (every node of a Ray cluster runs
# the same release; SGLang 0.5.23's `ray` extra asks >= 2.55.1).
ARG RAY_VERSION=2.60.0

WORKDIR /opt/moe-harness
COPY pyproject.toml README.md ./
COPY analysis ./analysis
COPY harness ./harness
COPY scenarios ./scenarios

# Every package the base has is a constraint: pip adds Ray and the harness's extras around the base's
# torch, SGLang, DeepEP and DeepGEMM, and fails the build rather than replace one. The embedded extra
# (the CPU demo's engine) is met by the base's torch and transformers on the GPU base.
# PIP_BREAK_SYSTEM_PACKAGES: the base's python3 may be a distribution's (Debian's marks it managed).
RUN python3 -c 'import sys, torch; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
 || { echo "Dockerfile: BASE needs python3 >= 3.11 with torch installed (docs/image.md)" >&2; exit 1; } \
 && python3 -m pip list --format=freeze | grep -v -i -E '^(ray|moe-harness)==' > /tmp/base-packages.txt \
 && PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --no-cache-dir -c /tmp/base-packages.txt \
      "ray[default]==${RAY_VERSION}" ".[embedded,ray,metrics]" \
 && rm /tmp/base-packages.txt \
 && cd / && python3 -c "import ray, harness.cli; assert ray.__version__ == '${RAY_VERSION}', ray.__version__"
ENV PYTHONUNBUFFERED=1
