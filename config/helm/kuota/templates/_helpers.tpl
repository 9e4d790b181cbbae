{{/*
Names. The release's prefix is on every name, cluster-scoped ones included, so that two releases never share an
object; `helm install kuota` in kuota-system gives config/deploy's names. Truncated to leave room for the longest
suffix (-admin-tokens) within the 63 characters of a Service or label value.
*/}}
{{- define "kuota.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 50 | trimSuffix "-" }}
{{- end }}

{{- define "kuota.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kuota.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kuota.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kuota.labels" -}}
{{ include "kuota.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kuota.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kuota.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the existing ServiceAccount kuota runs as (serviceAccount.create is false)" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The user kuota's own requests arrive as: the validating webhooks skip its updates. */}}
{{- define "kuota.serviceAccountUsername" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "kuota.serviceAccountName" . }}
{{- end }}

{{- define "kuota.webhookService" -}}
{{ include "kuota.fullname" . }}-webhook
{{- end }}

{{- define "kuota.tlsSecretName" -}}
{{ .Values.webhook.tls.secretName | default (printf "%s-webhook-tls" (include "kuota.fullname" .)) }}
{{- end }}

{{- define "kuota.quotaConfigMapName" -}}
{{ .Values.existingQuotaConfigMap | default (printf "%s-quota" (include "kuota.fullname" .)) }}
{{- end }}

{{- define "kuota.leaseName" -}}
{{ include "kuota.fullname" . }}-controller
{{- end }}

{{/*
Every job kind kuota knows, in the order of its registry (workloads/registry.py), which is the order
`kuota manifests --kinds` writes rules and webhooks in: API group, version and plural of each, and the kinds it
reads its pod sets from (the controller lists and watches those). `gated`: held back pod by pod by kuota's
scheduling gate, so kuota only reads the kind and acts on its pods, which get webhooks of their own; `podsOnly`:
pods alone are its workloads (no object of its own to watch or review). tests/test_helm_chart.py renders every kind and
compares the result with `kuota manifests`, so this table cannot drift from the registry unnoticed.
*/}}
{{- define "kuota.kindTable" -}}
- {kind: Job, group: batch, version: v1, plural: jobs}
- {kind: JobSet, group: jobset.x-k8s.io, version: v1alpha2, plural: jobsets}
- {kind: PyTorchJob, group: kubeflow.org, version: v1, plural: pytorchjobs}
- {kind: TFJob, group: kubeflow.org, version: v1, plural: tfjobs}
- {kind: XGBoostJob, group: kubeflow.org, version: v1, plural: xgboostjobs}
- {kind: PaddleJob, group: kubeflow.org, version: v1, plural: paddlejobs}
- {kind: JAXJob, group: kubeflow.org, version: v1, plural: jaxjobs}
- {kind: MPIJob, group: kubeflow.org, version: v2beta1, plural: mpijobs}
- kind: TrainJob
  group: trainer.kubeflow.org
  version: v1alpha1
  plural: trainjobs
  refers:
    - {group: trainer.kubeflow.org, plural: trainingruntimes}
    - {group: trainer.kubeflow.org, plural: clustertrainingruntimes}
- {kind: RayJob, group: ray.io, version: v1, plural: rayjobs}
- {kind: RayCluster, group: ray.io, version: v1, plural: rayclusters}
- {kind: LeaderWorkerSet, group: leaderworkerset.x-k8s.io, version: v1, plural: leaderworkersets, gated: true}
- {kind: Pod, group: "", version: v1, plural: pods, gated: true, podsOnly: true}
{{- end }}

{{/* "true" when an enabled kind is held pod by pod by kuota's scheduling gate (its pods get rights and webhooks). */}}
{{- define "kuota.anyGated" -}}
{{- range (include "kuota.kinds" . | fromYamlArray) }}{{ if .gated }}true{{ end }}{{ end }}
{{- end }}

{{/* The kinds of .Values.kinds, in the registry's order; an unknown name stops the render, listing the known. */}}
{{- define "kuota.kinds" -}}
{{- $table := include "kuota.kindTable" . | fromYamlArray }}
{{- $known := list }}
{{- range $table }}{{ $known = append $known .kind }}{{ end }}
{{- range .Values.kinds }}
{{- if not (has . $known) }}
{{- fail (printf "kinds: unknown job kind %q; known: %s" . (join ", " $known)) }}
{{- end }}
{{- end }}
{{- if not .Values.kinds }}
{{- fail "kinds: name at least one job kind (Job is kuota's default)" }}
{{- end }}
{{- $enabled := list }}
{{- range $table }}
{{- if has .kind $.Values.kinds }}{{ $enabled = append $enabled . }}{{ end }}
{{- end }}
{{- toYaml $enabled }}
{{- end }}

{{/* Checks across values that the schema cannot express; included by the Deployment, which is always rendered. */}}
{{- define "kuota.validate" -}}
{{- if not .Values.components }}
{{- fail "components: name at least one of webhook, controller, admin" }}
{{- end }}
{{- range .Values.components }}
{{- if not (has . (list "webhook" "controller" "admin")) }}
{{- fail (printf "components: unknown component %q; known: webhook, controller, admin" .) }}
{{- end }}
{{- end }}
{{- if and (has "admin" .Values.components) (not .Values.adminTokens.enabled) }}
{{- fail "adminTokens.enabled is false but components has admin: the admin API never runs without tokens; remove admin from components, or set adminTokens.enabled (the Secret is adminTokens.secretName)" }}
{{- end }}
{{- if and .Values.webhook.certManager.enabled .Values.webhook.tls.caBundle }}
{{- fail "webhook.tls.caBundle and webhook.certManager.enabled: cert-manager injects the caBundle; set one of them" }}
{{- end }}
{{- end }}

{{/*
A webhook's namespaceSelector: the labels it needs (`labels`), the release's namespace and webhook.excludeNamespaces
left out, and webhook.namespaceSelector added.
*/}}
{{- define "kuota.namespaceSelector" -}}
{{- $values := .ctx.Values.webhook }}
{{- $extra := $values.namespaceSelector | default dict }}
{{- $labels := merge (dict) (.labels | default dict) ($extra.matchLabels | default dict) }}
{{- $excluded := concat ($values.excludeNamespaces | default list) (list .ctx.Release.Namespace) | uniq }}
{{- $expressions := list (dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded) }}
{{- $expressions = concat $expressions ($extra.matchExpressions | default list) }}
{{- if $labels }}
matchLabels:
  {{- toYaml $labels | nindent 2 }}
{{- end }}
matchExpressions:
  {{- toYaml $expressions | nindent 2 }}
{{- end }}
