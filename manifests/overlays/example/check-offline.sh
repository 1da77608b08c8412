#!/bin/sh
# The offline check of this overlay, before any cluster is at hand (docs/install.md, "Make your overlay"):
# both kustomizations build with the kustomize inside kubectl, every image is pinned by a digest, and no
# placeholder is left. The shipped values are placeholders on purpose (the registry is
# registry.example.com, the image digest is sha256: and 64 zeros, the two NetworkPolicy CIDRs are
# SET-...): every one still there is listed, and the exit status is 1. An image without a digest (the
# sed of "Make your overlay" run with DIGEST unset writes an empty `digest:`, which kustomize renders as the
# base's tag alone, movable by whoever can push) is listed too.
#   sh manifests/overlays/my-cluster/check-offline.sh
# Schemas, admission and your rights are checked by the server-side dry run of step 1, which needs the
# cluster.
set -eu
here=$(dirname "$0")
built=$(kubectl kustomize "$here") || { echo "$here: does not build (above: why)" >&2; exit 2; }
boot=$(kubectl kustomize "$here/bootstrap") || { echo "$here/bootstrap: does not build (above: why)" >&2; exit 2; }
both=$(printf '%s\n%s\n' "$built" "$boot")
left=$(printf '%s\n' "$both" | grep -oE 'SET-[A-Za-z-]+|sha256:0{64}|registry\.example\.com' | sort -u) || true
# Every image line must end in @sha256: and 64 hex digits; list the ones that do not.
unpinned=$(printf '%s\n' "$both" | grep -E '^[[:space:]-]*image:' | sed -E 's/^[[:space:]-]*image:[[:space:]]*//' \
  | grep -vE '@sha256:[0-9a-f]{64}$' | sed 's/^/no digest: /' | sort -u) || true
if [ -n "$left$unpinned" ]; then
  echo "$here: placeholders not set yet (docs/install.md, \"Make your overlay\"):" >&2
  printf '%s\n%s\n' "$left" "$unpinned" | grep -v '^$' | sed 's/^/  /' >&2
  exit 1
fi
echo "$here: builds, every image pinned by digest, no placeholder left"
