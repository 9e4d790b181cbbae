# syntax=docker/dockerfile:1
# The image config/deploy/deployment.yaml and config/helm/kuota run (ghcr.io/kuota/kuota): `kuota serve` as a
# non-root user. Build from the repository's root: docker build -t ghcr.io/kuota/kuota:0.1.0 .
#
# The base is python:3.11-slim-bookworm pinned by the digest of its multi-platform index, as docker-library's
# repo-info repository records it (repos/python/remote/3.11-slim-bookworm.md at commit 33a22f41ac7b: Python
# 3.11.16, built 2026-08-25). Move the tag and the digest together.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

# Build: kuota and its dependencies into a virtualenv (every dependency ships wheels: no compiler needed), the
# bytecode compiled now, because the container's root filesystem is read-only.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/kuota
WORKDIR /src
COPY . .
RUN /opt/kuota/bin/pip install . && /opt/kuota/bin/python -m compileall -q /opt/kuota/lib

# Run: the virtualenv alone, owned by root and run as uid 65532 (numeric, so that the pod's runAsNonRoot can check
# it), working in /var/lib/kuota, where the Deployment mounts its emptyDir for the SQLite fallback.
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 65532 kuota \
 && useradd --system --uid 65532 --gid 65532 --home-dir /var/lib/kuota --shell /usr/sbin/nologin kuota \
 && install -d -o 65532 -g 65532 /var/lib/kuota
COPY --from=build /opt/kuota /opt/kuota
ENV PATH=/opt/kuota/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/var/lib/kuota
USER 65532:65532
WORKDIR /var/lib/kuota
# The webhooks (--webhook-port) and the admin API, probes and /metrics (--admin-port).
EXPOSE 9443 8080
ENTRYPOINT ["kuota"]
CMD ["serve"]
