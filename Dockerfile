# moe-harness on top of the official SGLang image of the default supported release. The tag must
# equal the default row's docker_image in harness/sglang/versions.yaml (tests/test_sglang_flags.py
# checks it). Build with
#   docker build -t REGISTRY/moe-harness:sglang-v0.5.23 .
# For another supported release pass its image, and plan/run with the same --sglang-version:
#   docker build --build-arg SGLANG_IMAGE=lmsysorg/sglang:v0.5.17 -t REGISTRY/moe-harness:sglang-v0.5.17 .
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23
FROM ${SGLANG_IMAGE}

# Ray for placement and jobs; the harness itself with its Ray and metrics extras.
# The image's own torch/CUDA stay: no torch extra is installed here.
WORKDIR /opt/moe-harness
COPY pyproject.toml README.md ./
COPY analysis ./analysis
COPY harness ./harness
COPY scenarios ./scenarios
RUN python3 -m pip install --no-cache-dir "ray[default]>=2.40" prometheus-client \
 && python3 -m pip install --no-cache-dir --no-deps . \
 && python3 -m pip install --no-cache-dir msgspec pyyaml "pydantic>=2.6" rich
ENV PYTHONUNBUFFERED=1
