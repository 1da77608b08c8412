#!/bin/sh
# Prints the Secret that registers this member cluster in the hub (docs/multicluster.md, "Register a
# member"): a kubeconfig for the hub's account here (tls-injector-hub, whose token Secret this component
# installs), labelled tls-injector.io/member=MEMBER. Nothing is written: apply the output in the hub.
#
#   manifests/components/member/member-secret.sh MEMBER SERVER [CONTEXT] | kubectl --context HUB apply -f -
#
# MEMBER   the member's name in the federation: a DNS-1123 label (lower-case letters, digits, '-'; at most
#          63), unique among the hub's members; it names the member's intermediates and its metric series
# SERVER   this cluster's API server URL as the hub's reconciler pods reach it (https://host:port)
# CONTEXT  the kubectl context of this member (default: the current one)
# The CA the hub verifies SERVER with is the one in the token Secret (the cluster's own CA); if SERVER is
# behind a load balancer with a certificate from another CA, edit certificate-authority-data.
# The token never reaches a command line: it goes from kubectl's output to a file only this user reads.
set -eu
usage() { echo "usage: $0 MEMBER SERVER [CONTEXT]" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || usage
member=$1
server=$2
namespace=tls-injector
if [ $# -eq 3 ]; then set -- "--context=$3"; else set --; fi
if [ ${#member} -gt 63 ] || ! printf '%s' "$member" | grep -Eqx '[a-z0-9]([-a-z0-9]*[a-z0-9])?'; then
  echo "$0: member name '$member' is not a DNS-1123 label (a-z, 0-9, '-', at most 63)" >&2; exit 2
fi
case $server in https://?*) ;; *) echo "$0: SERVER must be an https:// URL, not '$server'" >&2; exit 2 ;; esac

umask 077
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT INT TERM
kubectl "$@" -n "$namespace" get secret tls-injector-hub-token -o 'jsonpath={.data.token}' > "$scratch/token.b64"
kubectl "$@" -n "$namespace" get secret tls-injector-hub-token -o 'jsonpath={.data.ca\.crt}' > "$scratch/ca.b64"
if [ ! -s "$scratch/token.b64" ] || [ ! -s "$scratch/ca.b64" ]; then
  echo "$0: secret $namespace/tls-injector-hub-token has no token or ca.crt yet (the cluster's token controller" \
       "fills it in seconds after the member install; try again)" >&2
  exit 1
fi
{
  printf 'apiVersion: v1\nkind: Config\nclusters:\n- name: %s\n  cluster:\n    server: %s\n' "$member" "$server"
  printf '    certificate-authority-data: %s\n' "$(cat "$scratch/ca.b64")"
  printf 'users:\n- name: tls-injector-hub\n  user:\n    token: '
  base64 -d < "$scratch/token.b64"
  printf '\ncontexts:\n- name: %s\n  context:\n    cluster: %s\n    user: tls-injector-hub\n' "$member" "$member"
  printf '    namespace: %s\ncurrent-context: %s\n' "$namespace" "$member"
} > "$scratch/kubeconfig"
kubectl create secret generic "tls-injector-member-$member" --namespace "$namespace" \
  --from-file=kubeconfig="$scratch/kubeconfig" --dry-run=client -o yaml \
  | kubectl label --local -f - "tls-injector.io/member=$member" -o yaml
