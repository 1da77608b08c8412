{{/*
Names are fixed, not derived from the release name: the program's flags default to them (the doctor's
--webhook-configurations, --webhook-service, --webhook-secret, --reconciler-service-account), the
cluster-scoped objects (PriorityClass, ClusterRoles, webhook configurations) allow one install per
cluster, and the kustomize manifests under manifests/ use the same ones. The namespace is the release's.
*/}}

{{/* Common labels: the component's own, then commonLabels (the schema keeps these two keys out of it). */}}
{{- define "tls-injector.labels" -}}
app.kubernetes.io/name: tls-injector
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels: never commonLabels, so changing those is never a selector change (immutable). */}}
{{- define "tls-injector.selector" -}}
app.kubernetes.io/name: tls-injector
app.kubernetes.io/component: {{ . }}
{{- end }}

{{/* repository@digest when a digest is set (what kustomize writes for `digest:`), else repository:tag. */}}
{{- define "tls-injector.image" -}}
{{- with .Values.image -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ .tag | default $.Chart.AppVersion }}
{{- end -}}
{{- end -}}
{{- end }}

{{- define "tls-injector.pullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Namespaces no webhook entry and no admission policy binding ever matches: the control plane's, the
injector's own (so it can never block its own recovery), and excludedNamespaces. As a JSON list.
*/}}
{{- define "tls-injector.excludedNamespaces" -}}
{{- concat (list "kube-system" "kube-node-lease" "kube-public" .Release.Namespace) .Values.excludedNamespaces | uniq | toJson -}}
{{- end }}

{{/* The flags every component shares, each only when it differs from the program's default. */}}
{{- define "tls-injector.logLevel" -}}
{{- if ne .Values.logLevel "info" }}
- --log-level={{ .Values.logLevel }}
{{- end }}
{{- end }}

{{/*
The certificate profile bounds (values `profiles`), as flags of `reconcile` and `serve`: only those that differ
from the program's own defaults, so the default install renders the same objects as manifests/base.
*/}}
{{- define "tls-injector.profileArgs" -}}
{{- $p := .Values.profiles }}
{{- if ne $p.defaultDuration "2160h" }}
- --default-duration={{ $p.defaultDuration }}
{{- end }}
{{- if ne $p.minDuration "24h" }}
- --min-duration={{ $p.minDuration }}
{{- end }}
{{- if ne $p.maxDuration "8760h" }}
- --max-duration={{ $p.maxDuration }}
{{- end }}
{{- if ne $p.minRenewBefore "1h" }}
- --min-renew-before={{ $p.minRenewBefore }}
{{- end }}
{{- if ne $p.defaultKeyAlgorithm "ecdsa-p256" }}
- --default-key-algorithm={{ $p.defaultKeyAlgorithm }}
{{- end }}
{{- $allowed := join "," $p.allowedKeyAlgorithms }}
{{- if ne $allowed "ecdsa-p256,ecdsa-p384,rsa-2048,rsa-3072,rsa-4096,ed25519" }}
- --allowed-key-algorithms={{ $allowed }}
{{- end }}
{{- end }}

{{/*
Checks the schema cannot make: they depend on the release, not on the values.
*/}}
{{- define "tls-injector.validate" -}}
{{- /* Only for a release being installed or upgraded (helm template is an install): `helm lint` renders
     with neither set, in "default" unless -n is given, and must not report this as a lint finding. */ -}}
{{- if and (or .Release.IsInstall .Release.IsUpgrade) (has .Release.Namespace (list "default" "kube-system" "kube-public" "kube-node-lease")) -}}
{{- fail (printf "install tls-injector into a namespace of its own (helm install -n tls-injector), not %q: the webhooks exclude their own namespace, and the CA Secrets live there" .Release.Namespace) -}}
{{- end -}}
{{- end }}

{{/*
A component's pod values (webhook, reconciler, bootstrap): .v is its values, .component its name.
"tls-injector.podMetadata": the template's labels (selector, opt-out, podLabels) and podAnnotations.
"tls-injector.scheduling": nodeSelector and tolerations, when set.
"tls-injector.extraEnv": the container's env, when extraEnv is set.
*/}}
{{- define "tls-injector.podMetadata" -}}
labels:
  {{- include "tls-injector.selector" .component | nindent 2 }}
  tls-injector.io/inject: "false"
  {{- with .v.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .v.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "tls-injector.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "tls-injector.extraEnv" -}}
{{- with .extraEnv }}
env:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
