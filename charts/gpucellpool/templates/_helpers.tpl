{{/* Name of the chart, overridable. */}}
{{- define "gpucellpool.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified name; 40 chars leave room for the longest suffix (-validating-webhook). */}}
{{- define "gpucellpool.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "gpucellpool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "gpucellpool.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "gpucellpool.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpucellpool.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "gpucellpool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "gpucellpool.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest is set, else repository:tag (tag "" = appVersion). */}}
{{- define "gpucellpool.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Namespaces whose Secrets the operator may use: poolNamespaces, else watchNamespaces, else the
release namespace (a default install serves pools there). Never cluster-wide.
*/}}
{{- define "gpucellpool.secretNamespaces" -}}
{{- $ns := .Values.poolNamespaces | default .Values.watchNamespaces | default (list .Release.Namespace) }}
{{- toJson (uniq $ns) }}
{{- end }}

{{- define "gpucellpool.webhookServiceName" -}}
{{- printf "%s-webhook" (include "gpucellpool.fullname" .) }}
{{- end }}

{{- define "gpucellpool.webhookConfigurationName" -}}
{{- printf "%s-validating-webhook" (include "gpucellpool.fullname" .) }}
{{- end }}

{{- define "gpucellpool.webhookCertSecret" -}}
{{- printf "%s-webhook-cert" (include "gpucellpool.fullname" .) }}
{{- end }}

{{/*
Rules to provision cells: KubeSwift guests (SwiftGuest path) and Cluster API objects (CAPI
path). Namespaced objects only; a ClusterRole when watching every namespace, else one Role
per watched namespace.
*/}}
{{- define "gpucellpool.provisioningRules" -}}
- apiGroups: [swift.kubeswift.io]
  resources: [swiftguests]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [gpu.kubeswift.io]
  resources: [swiftgpuprofiles]
  verbs: [get, list, watch]
- apiGroups: [image.kubeswift.io]
  resources: [swiftimages]
  verbs: [get, list, watch]
- apiGroups: [seed.kubeswift.io]
  resources: [swiftseedprofiles]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [cluster.x-k8s.io]
  resources: [machines]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [cluster.x-k8s.io]
  resources: [clusters]
  verbs: [get, list, watch]
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [kubeswiftmachines]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [bootstrap.cluster.x-k8s.io]
  resources: [kubeadmconfigs]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [bootstrap.cluster.x-k8s.io]
  resources: [kubeadmconfigtemplates]
  verbs: [get, list, watch]
- apiGroups: [resource.k8s.io]
  resources: [resourceclaims, resourceclaimtemplates]
  verbs: [get, list, watch]
{{- end }}

{{/* Secrets in a namespace where pools live (join templates, kubeconfigs, rendered seeds). */}}
{{- define "gpucellpool.secretRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, list, watch, create, update, patch, delete]
{{- end }}
