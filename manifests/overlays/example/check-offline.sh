#!/bin/sh
# The offline check of this overlay, before any cluster is at hand (docs/install.md, "Make your overlay"):
# both kustomizations build with the kustomize inside kubectl, and no placeholder is left. The shipped
# values are placeholders on purpose (the image digest is sha256: and 64 zeros, the two NetworkPolicy
# CIDRs are SET-...): every one still there is listed, and the exit status is 1.
#   sh manifests/overlays/my-cluster/check-offline.sh
# Schemas, admission and your rights are checked by the server-side dry run of step 1, which needs the
# cluster.
set -eu
here=$(dirname "$0")
built=$(kubectl kustomize "$here") || { echo "$here: does not build (above: why)" >&2; exit 2; }
boot=$(kubectl kustomize "$here/bootstrap") || { echo "$here/bootstrap: does not build (above: why)" >&2; exit 2; }
left=$(printf '%s\n%s\n' "$built" "$boot" | grep -oE 'SET-[A-Za-z-]+|sha256:0{64}' | sort -u) || true
if [ -n "$left" ]; then
  echo "$here: placeholders not set yet (docs/install.md, \"Make your overlay\"):" >&2
  printf '  %s\n' $left >&2
  exit 1
fi
echo "$here: builds, no placeholder left"
