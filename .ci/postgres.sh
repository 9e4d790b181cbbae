#!/usr/bin/env bash
# PostgreSQL for kuota's tests: Debian's server on 127.0.0.1:5432, user postgres with trust authentication from
# 127.0.0.1 (a test machine's loopback only), and a database named `test`. Installs the server where it is missing,
# starts it where it is not running, and does nothing else when all of that is already so. Needs root.
set -euo pipefail
if ! command -v pg_ctlcluster >/dev/null 2>&1 || [[ -z "$(ls /etc/postgresql 2>/dev/null)" ]]; then
  echo "postgres.sh: installing PostgreSQL from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
version="$(ls /etc/postgresql | sort -V | tail -1)"
hba="/etc/postgresql/$version/main/pg_hba.conf"
if ! grep -Eq '^host[[:space:]]+all[[:space:]]+postgres[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
  # First match wins in pg_hba.conf: put the trust line for postgres over loopback before the others.
  sed -i '0,/^host/s//host    all             postgres        127.0.0.1\/32            trust\nhost/' "$hba"
  reload=1
fi
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
elif [[ -n "${reload:-}" ]]; then
  pg_ctlcluster --skip-systemctl-redirect "$version" main reload
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE test"
fi
echo "postgres.sh: PostgreSQL $version ready on 127.0.0.1:5432 (user postgres, database test)" >&2
