#!/usr/bin/env bash
# Runs kuota on this machine against the control plane of `make cluster`, the way config/deploy runs it in a
# cluster: config/deploy applied as it is (Namespace, ServiceAccount, least-privilege RBAC, the quota ConfigMap,
# Service, webhooks, Deployment), then kuota itself started here instead of in the Deployment's Pods (kwok's pods
# run no containers, so the Deployment is scaled to 0), with the kuota ServiceAccount's token and the quota file
# from the ConfigMap. The two webhook configurations get a 127.0.0.1 URL and the CA of a certificate made by
# `kuota certs --ip 127.0.0.1`; nothing else of them changes. Ctrl-C stops kuota; the cluster keeps running.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$(realpath -m "${CLUSTER_DIR:-.cluster}")"
port="${WEBHOOK_PORT:-9443}"
admin_port="${ADMIN_PORT:-8080}"
kuota="${KUOTA:-.venv/bin/kuota}"
bin="$(testing/cluster/build.sh)"
export KUBECONFIG="$dir/kubeconfig"
k() { "$bin" kubectl "$@"; }
if ! k get --raw /readyz >/dev/null 2>&1; then
  echo "try-kuota: no control plane answers at $KUBECONFIG; start one with 'make cluster' in another terminal" >&2
  exit 1
fi
try="$dir/try"
mkdir -p "$try"

k apply --server-side -k config/deploy
k -n kuota-system scale deployment kuota --replicas=0

"$kuota" certs --out "$try/certs" --ip 127.0.0.1 --force >/dev/null
bundle="$(base64 -w0 < "$try/certs/ca.crt")"
for kind in mutatingwebhookconfiguration/kuota-mutate validatingwebhookconfiguration/kuota-validate; do
  count="$(k get "$kind" -o jsonpath='{range .webhooks[*]}{.name}{"\n"}{end}' | wc -l)"
  paths="$(k get "$kind" -o jsonpath='{range .webhooks[*]}{.clientConfig.service.path}{"\n"}{end}')"
  patch="["
  i=0
  while read -r path; do
    [[ $i -gt 0 ]] && patch+=","
    patch+="{\"op\":\"replace\",\"path\":\"/webhooks/$i/clientConfig\",\"value\":{\"url\":\"https://127.0.0.1:$port$path\",\"caBundle\":\"$bundle\"}}"
    i=$((i + 1))
  done <<< "$paths"
  patch+="]"
  [[ $i -eq $count ]] && k patch "$kind" --type=json -p "$patch" >/dev/null
done

k -n kuota-system get configmap kuota-quota -o jsonpath='{.data.quota\.yaml}' > "$try/quota.yaml"
server="$(k config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
token="$(k -n kuota-system create token kuota --duration=24h)"
KUBECONFIG="$try/kubeconfig" k config set-cluster rig --server="$server" \
  --certificate-authority="$dir/pki/ca.crt" --embed-certs >/dev/null
KUBECONFIG="$try/kubeconfig" k config set-credentials kuota --token="$token" >/dev/null
KUBECONFIG="$try/kubeconfig" k config set-context rig --cluster=rig --user=kuota >/dev/null
KUBECONFIG="$try/kubeconfig" k config use-context rig >/dev/null

# An admin token for the admin API's client (`kuota queues`, `kuota why`, ...), made once and kept with the rest.
if [[ ! -s "$try/admin-token" ]]; then
  rm -f "$try/tokens.yaml"
  "$kuota" tokens add you --role admin --file "$try/tokens.yaml" > "$try/admin-token"
fi

echo "try-kuota: kuota serves the webhooks on 127.0.0.1:$port and the admin API on 127.0.0.1:$admin_port" >&2
echo "try-kuota: for the kuota client: export KUOTA_SERVER=http://127.0.0.1:$admin_port KUOTA_TOKEN=\$(cat $try/admin-token)" >&2
exec "$kuota" serve --config "$try/quota.yaml" --kubeconfig "$try/kubeconfig" --admin-tokens "$try/tokens.yaml" \
  --tls-cert "$try/certs/tls.crt" --tls-key "$try/certs/tls.key" \
  --webhook-host 127.0.0.1 --webhook-port "$port" --admin-host 127.0.0.1 --admin-port "$admin_port" \
  --database-url "sqlite+aiosqlite:///$try/ledger.db" --lease-duration 15 --requeue-backoff 10s
