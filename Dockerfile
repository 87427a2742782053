# syntax=docker/dockerfile:1
# The router image: the project's wheel on a slim, pinned Python, run as a non-root user.
#
#   docker build -t kafka-order-router .                  the router (default target)
#   docker run --rm kafka-order-router topics plan        any `router` command
#   docker build --target demo -t kafka-order-router-demo .   plus ops/ for `python -m ops.demo`
#
# docker-compose.yml builds both; tests/unit/cli/test_compose.py checks this file against the
# project (console script, non-root user, pinned Python).

ARG PYTHON_VERSION=3.11.13

# ---------------------------------------------------------------- build: the wheel
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY router/ router/
COPY spark_jobs/ spark_jobs/
COPY schemas/ schemas/
RUN python -m pip wheel --no-deps --wheel-dir /dist .

# ---------------------------------------------------------------- runtime: the wheel installed
FROM python:${PYTHON_VERSION}-slim-bookworm AS router-base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
# The wheel is mounted from the build stage, never copied: no layer keeps it.
RUN --mount=type=bind,from=build,source=/dist,target=/tmp/dist \
    python -m pip install /tmp/dist/*.whl \
 && groupadd --system --gid 10001 router \
 && useradd --system --uid 10001 --gid router --home-dir /home/router --create-home \
        --shell /usr/sbin/nologin router
WORKDIR /home/router
USER 10001:10001
# SIGTERM makes every router process finish its batch, commit and exit 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["router"]
CMD ["--help"]

# ---------------------------------------------------------------- demo: plus the demo driver
# ops/ is not part of the wheel: the end-to-end demo (`make demo` in a container) with its
# own verdict. It runs its own units (`python -m router ...`) on a fresh topology.
FROM router-base AS demo
COPY ops/ /opt/router-ops/ops/
ENV PYTHONPATH=/opt/router-ops
ENTRYPOINT ["python", "-m", "ops.demo"]
CMD []

# ---------------------------------------------------------------- the router image (default)
FROM router-base AS router
