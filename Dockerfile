# syntax=docker/dockerfile:1
# tls-injector: the webhook server, reconciler and bootstrap in one image.
#
# Two stages: the builder installs the hash-locked dependencies and a wheel built from pyproject.toml
# into a virtualenv, then assembles the image's whole filesystem with tools/rootfs.sh: the interpreter,
# the virtualenv and exactly the shared libraries they load. The final stage is that tree on `scratch`,
# so no shell, coreutils, pip, package manager, compiler, build backend or source tree ships: code
# execution in the container finds no tool to go on with. (tests/shipping/test_image_rootfs.py assembles
# the same tree from the test interpreter and runs the server in it.)
#
# Everything is pinned: the base by version tag and digest (a tag alone can be re-pointed), every
# dependency and the build backend by version and hash (requirements.lock, requirements-build.lock;
# `pip --require-hashes` refuses any file whose hash is not listed). To move to a newer base, take the
# digest of the new tag from the registry (`docker buildx imagetools inspect python:<tag>`).
#
# PYTHON_IMAGE names the base; PYTHON_PREFIX is where its interpreter lives (/usr/local in the python
# image). A base with its interpreter elsewhere passes both, as the test suite does with a Debian base
# of its own (tools/image.py, docs/install.md): `--build-arg PYTHON_PREFIX=/usr`.

ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm@sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3

FROM ${PYTHON_IMAGE} AS builder
ARG PYTHON_PREFIX=/usr/local
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# The venv lives at the path it will have in the final image: its scripts' shebangs point there.
RUN python -m venv /opt/tls-injector
# Dependencies first, in their own layer: a change to app/ alone reuses it.
COPY requirements.lock requirements-build.lock ./
RUN /opt/tls-injector/bin/pip install --require-hashes --no-deps -r requirements.lock \
 && python -m pip install --require-hashes --no-deps -r requirements-build.lock
COPY pyproject.toml README.md ./
COPY app ./app
# --no-build-isolation: build with the hash-locked backend just installed, not one fetched unpinned;
# --no-deps: the dependencies are the locked ones above, never resolved again. Last, pip and the
# setuptools `python -m venv` put in the venv (Python 3.11 does): nothing at run time imports either.
RUN python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/tls-injector/bin/pip install --no-deps /wheels/*.whl \
 && /opt/tls-injector/bin/pip check \
 && /opt/tls-injector/bin/pip uninstall --yes pip setuptools
COPY tools/rootfs.sh /usr/local/bin/rootfs.sh
RUN /usr/local/bin/rootfs.sh "${PYTHON_PREFIX}" /opt/tls-injector /rootfs

FROM scratch
# Every dependency ships manylinux wheels (cryptography, orjson, uvloop, httptools, cel-expr-python):
# nothing is compiled, and the runtime needs no extra system package.
ENV PATH=/opt/tls-injector/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
COPY --from=builder /rootfs /
# Numeric, so Kubernetes' runAsNonRoot can verify it without an /etc/passwd entry; the manifests use
# the same 65532.
USER 65532:65532
# 8443: the webhook (HTTPS); 8080: the reconciler's /metrics and /healthz (plain HTTP).
EXPOSE 8443 8080
ENTRYPOINT ["tls-injector"]
CMD ["serve"]
