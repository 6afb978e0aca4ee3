# syntax=docker/dockerfile:1
# think-server: build the chat page with Node, install the server into a virtualenv, and run that
# virtualenv on a slim Python image (no Node, no source tree, no build tools in the final image).
#
# Base images are pinned by digest, so a rebuild gets the same bytes. To move to newer ones:
#   docker buildx imagetools inspect node:24-slim     (and python:3.11-slim), then edit the ARGs.
ARG NODE_IMAGE=node:24-slim@sha256:a9f5f7c91a432850b2a8a7797adf5eadb6c733ceed61167806cee7ea7fbc29df
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${NODE_IMAGE} AS web
WORKDIR /web
COPY app/web/package.json app/web/package-lock.json ./
# As the Makefile does: the lock file's packages, and none of their install scripts run.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY app/web/ ./
RUN npm run build

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/think
WORKDIR /src
# Dependencies first, in their own layer, at the versions CI tests (constraints.txt): a change to
# the code reuses this layer instead of installing everything again.
COPY pyproject.toml constraints.txt ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print(*p['dependencies'], *p['optional-dependencies']['otel'], sep='\n')" \
        > requirements.txt \
    && /opt/think/bin/pip install -c constraints.txt -r requirements.txt
COPY README.md ./
COPY protocol/ protocol/
COPY storage/ storage/
COPY harness/ harness/
COPY app/ app/
# The one import name: its __init__, and the links to the four folders above (a wheel maps them).
COPY think_server/ think_server/
COPY --from=web /web/dist/ app/web/dist/
RUN /opt/think/bin/pip install --no-deps .

FROM ${PYTHON_IMAGE} AS server
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/think/bin:$PATH \
    THINK_HOST=0.0.0.0 \
    THINK_PORT=8000 \
    THINK_DATA_DIR=/data
# A numeric user: a bind-mounted data dir is given to it with `chown -R 10001:10001 <dir>`.
RUN groupadd --gid 10001 think \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin think \
    && install -d -o 10001 -g 10001 /data
COPY --from=build /opt/think /opt/think
USER 10001:10001
VOLUME ["/data"]
EXPOSE 8000
# Ready, not only alive: /readyz answers 200 once the work a crash left open has been taken up.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('THINK_PORT', '8000')}/readyz\", timeout=2)"]
# SIGTERM: stop accepting, suspend running turns (the next start recovers them), close sockets.
STOPSIGNAL SIGTERM
CMD ["think-server", "serve"]
