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
    GPU_CREDITS_DATA_DIR=/data

# Fixed, unprivileged uid/gid so volume ownership is predictable across rebuilds.
RUN groupadd --system --gid 10001 app \
    && useradd --system --no-log-init --uid 10001 --gid app \
        --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin app \
    && mkdir -p /data /keys \
    && chown app:app /data /keys

COPY --from=build /opt/venv /opt/venv

WORKDIR /data
VOLUME ["/data"]

EXPOSE 8000

# slim has no curl: probe with the standard library (urlopen raises on non-2xx -> exit 1).
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

USER 10001:10001

CMD ["gpu-credits", "serve", "--host", "0.0.0.0", "--port", "8000"]
