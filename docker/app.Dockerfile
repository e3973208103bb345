# The project image: the REST API (`search serve`), the search page (`search ui`) and, as the
# `export` target, the one-shot model export (`search models build`, which needs PyTorch).
#   docker build -f docker/app.Dockerfile --target app .      # api, ui
#   docker build -f docker/app.Dockerfile --target export .   # models
FROM python:3.11-slim-bookworm AS app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_TELEMETRY=1
WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY search search
COPY indexer indexer
COPY ui ui
COPY triton_repo triton_repo
COPY bench bench
COPY samples samples
COPY docker/export-models.sh docker/export-models.sh
# Editable, so PROJECT_ROOT is /app (the page's ui/app.py and the repository's configs are found there).
# qdrant-client stays on the Qdrant server's minor (docker-compose.yml pins the server).
# EXTRAS=heic,scale adds Ray for the cluster's head and workers (docker-compose.cluster.yml).
# constraints.txt: every package at the version the test suite passed with (scripts/lock.sh).
ARG EXTRAS=heic
RUN pip install -c constraints.txt -e ".[${EXTRAS}]" "qdrant-client~=1.20.0" \
 && useradd --system --uid 10001 --create-home search \
 && mkdir -p /data /models && chown search /data
ENV SEARCH_DATA_DIR=/data SEARCH_TRITON_REPO=/models
USER search
EXPOSE 8080 8501
CMD ["search", "serve", "--host", "0.0.0.0", "--port", "8080"]

FROM app AS export
USER root
# PyTorch's CPU build: a plain `torch` from PyPI would pull the CUDA build and several GB of NVIDIA
# packages that an export does not need.
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "$TORCH_INDEX" "$TORCH_SPEC" && pip install -c constraints.txt -e ".[export]"
# root: it writes the shared volumes (model repository, TensorRT engine cache) that Triton reads.
CMD ["sh", "docker/export-models.sh"]
