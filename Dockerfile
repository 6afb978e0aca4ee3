# syntax=docker/dockerfile:1
# think-server: build the chat page with Node, then run the server on a slim Python image.

FROM node:24-slim AS web
WORKDIR /web
COPY app/web/package.json app/web/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY app/web/ ./
RUN npm run build

FROM python:3.11-slim AS server
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    THINK_HOST=0.0.0.0 \
    THINK_PORT=8000 \
    THINK_DATA_DIR=/data
RUN useradd --create-home --uid 10001 think \
    && mkdir /data && chown think:think /data
WORKDIR /srv/think
COPY pyproject.toml README.md ./
COPY protocol/ protocol/
COPY storage/ storage/
COPY harness/ harness/
COPY app/ app/
COPY --from=web /web/dist/ app/web/dist/
RUN pip install . && rm -rf /srv/think/app/web/node_modules
USER think
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('THINK_PORT', '8000')}/healthz\", timeout=2)"]
# SIGTERM: stop accepting, suspend running turns (the next start recovers them), close sockets.
STOPSIGNAL SIGTERM
CMD ["think-server", "serve"]
