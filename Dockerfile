# syntax=docker/dockerfile:1
# tls-injector: the webhook server, reconciler and bootstrap in one image.
#
# Two stages: the builder turns pyproject.toml into a wheel and installs it with its dependencies into
# a virtualenv; the final stage copies only that virtualenv onto a fresh slim base, so no compiler,
# pip cache, build backend or source tree ships.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The venv lives at the path it will have in the final image: its scripts' shebangs point there.
RUN python -m venv /opt/tls-injector
COPY pyproject.toml README.md ./
COPY app ./app
RUN python -m pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/tls-injector/bin/pip install /wheels/*.whl \
 && /opt/tls-injector/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
# Every dependency ships manylinux wheels (cryptography, orjson, uvloop, httptools, cel-expr-python):
# nothing is compiled, and the runtime needs no extra system package.
ENV PATH=/opt/tls-injector/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /opt/tls-injector /opt/tls-injector
# Numeric, so Kubernetes' runAsNonRoot can verify it without an /etc/passwd entry; the manifests use
# the same 65532.
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["tls-injector"]
CMD ["serve"]
