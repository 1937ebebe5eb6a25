# moe-harness on top of the pinned official SGLang image. The tag must equal
# harness/sglang/pin.yaml's docker_image (tests/test_sglang_flags.py checks it); build with
#   docker build -t moe-harness:sglang .
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.13.post1
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
