# checkpointd, the durability sidecar, as a slim container image.
#
#   docker build -t checkpointd:0.1.0 .
#   docker run --rm -p 7470:7470 -v checkpointd-data:/var/lib/checkpointd \
#       -e CHECKPOINTD_AUTH_TOKEN="$(openssl rand -hex 32)" checkpointd:0.1.0
#
# Two stages: the builder turns the two distributions of this repository (pyclient/ is
# checkpointd-client, . is checkpointd) into wheels with the locked build backend
# (requirements/build.txt), and installs them into a virtualenv with exactly the locked,
# hash-checked dependencies of requirements/serve.txt (what `make run` installs); nothing is
# resolved at build time, so an image built later has the same packages. The final stage is
# python:3.11-slim plus that virtualenv and nothing else: no compilers, no sources, no wheels,
# and no pip in the virtualenv (the builder's pip installs into it). Every dependency ships
# binary wheels for Python 3.11 on amd64 and arm64, so nothing is compiled.
#
# tests/packaging/test_dockerfile.py runs the builder's RUN steps as written here and serves
# from the virtualenv they build; keep them to plain commands over the ARG/ENV paths below.

FROM python:3.11-slim AS builder

# Where the build tools, the wheels and the virtualenv are built (the final stage copies the
# virtualenv from the same path, so its scripts keep working).
ARG BUILD_ENV=/build-env
ARG WHEEL_DIR=/wheels
ENV VIRTUAL_ENV=/opt/checkpointd \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY requirements/build.txt requirements/serve.txt requirements/
COPY pyclient/ pyclient/
COPY pyproject.toml README.md LICENSE ./
COPY docs/pypi/ docs/pypi/
COPY server/ server/

RUN python -m venv "$BUILD_ENV" \
    && "$BUILD_ENV/bin/pip" install --require-hashes --no-deps -r requirements/build.txt \
    && "$BUILD_ENV/bin/pip" wheel --no-build-isolation --no-deps --wheel-dir "$WHEEL_DIR" \
        ./pyclient . \
    && python -m venv --without-pip "$VIRTUAL_ENV" \
    && python -m pip --python "$VIRTUAL_ENV/bin/python" install --require-hashes --no-deps \
        -r requirements/serve.txt \
    && python -m pip --python "$VIRTUAL_ENV/bin/python" install --no-deps \
        "$WHEEL_DIR"/checkpointd_client-*.whl "$WHEEL_DIR"/checkpointd-*.whl \
    && python -m pip --python "$VIRTUAL_ENV/bin/python" check \
    && "$VIRTUAL_ENV/bin/checkpointd" version


FROM python:3.11-slim

LABEL org.opencontainers.image.title="checkpointd" \
      org.opencontainers.image.description="A durability sidecar for AI agents: checkpoints, interrupts and idempotency over gRPC." \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"

# A fixed numeric uid/gid, so Kubernetes can check runAsNonRoot and a pod can share the Unix
# socket with an app container running under the same ids (deploy/kubernetes).
RUN groupadd --system --gid 10001 checkpointd \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin checkpointd \
    && mkdir -p /var/lib/checkpointd /var/run/checkpointd \
    && chown 10001:10001 /var/lib/checkpointd /var/run/checkpointd \
    && chmod 0750 /var/lib/checkpointd /var/run/checkpointd

COPY --from=builder /opt/checkpointd /opt/checkpointd

# The SQLite file lives in CHECKPOINTD_DATA_DIR (checkpointd.db); set CHECKPOINTD_STORE to a
# postgresql:// URL to use Postgres instead.
ENV PATH=/opt/checkpointd/bin:$PATH \
    VIRTUAL_ENV=/opt/checkpointd \
    CHECKPOINTD_DATA_DIR=/var/lib/checkpointd \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:10001
VOLUME ["/var/lib/checkpointd", "/var/run/checkpointd"]
EXPOSE 7470
STOPSIGNAL SIGTERM

# Outside a container checkpointd listens on loopback only. Inside one, 0.0.0.0 is the
# container's own network namespace: other containers of the pod reach it through the Unix
# socket or localhost, the kubelet's gRPC probes through the pod IP, and nothing outside the
# pod unless a Service or a published port says so. Listening there needs a token
# (CHECKPOINTD_AUTH_TOKEN, or --auth-tokens-file), TLS, or CHECKPOINTD_INSECURE=1 saying the
# network is the boundary; without one the server refuses to start (SECURITY.md).
CMD ["checkpointd", "serve", "--listen", "0.0.0.0:7470", "--listen", "unix:///var/run/checkpointd/checkpointd.sock"]
