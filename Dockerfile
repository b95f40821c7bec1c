# syntax=docker/dockerfile:1

# ---- build stage: install the package and its pinned dependencies into a virtualenv ----
FROM python:3.11.14-slim-bookworm AS build

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src

RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:${PATH}"

# Dependency metadata and sources; everything else is kept out by .dockerignore.
COPY pyproject.toml constraints.txt README.md ./
COPY app/ ./app/

RUN pip install --no-cache-dir -c constraints.txt .

# ---- runtime stage: only the virtualenv, no sources or build leftovers ----
FROM python:3.11.14-slim-bookworm AS runtime

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH="/opt/venv/bin:${PATH}" \
    GPU_CREDITS_DATA_DIR=/data \
    GPU_CREDITS_HOST=0.0.0.0 \
    GPU_CREDITS_PORT=8000

# Fixed, unprivileged uid/gid so volume ownership is predictable across rebuilds.
RUN groupadd --system --gid 10001 app \
    && useradd --system --no-log-init --uid 10001 --gid app \
        --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin app \
    && mkdir -p /data /keys \
    && chown app:app /data /keys

COPY --from=build /opt/venv /opt/venv

WORKDIR /data
VOLUME ["/data"]

# The default of GPU_CREDITS_PORT; the service, its healthcheck and docker-compose.yml follow
# the variable when it is set (a --port flag would win over it, hence none below).
EXPOSE 8000

# Readiness (/readyz: storage reachable, not degraded) on the port the service listens on,
# read from the environment when the check runs. slim has no curl: the standard library
# probes (urlopen raises on a non-2xx answer or no answer -> exit 1, unhealthy).
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % (os.environ.get('GPU_CREDITS_PORT') or '8000'), timeout=4)"]

USER 10001:10001

# Host and port come from GPU_CREDITS_HOST and GPU_CREDITS_PORT (ENV above).
CMD ["gpu-credits", "serve"]
