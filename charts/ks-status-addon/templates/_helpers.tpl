{{/* Name of the release's objects: the release name, with the chart name unless it has it. */}}
{{- define "ks-status-addon.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ks-status-addon.selectorLabels" -}}
app.kubernetes.io/name: ks-addon
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ks-status-addon.labels" -}}
{{ include "ks-status-addon.selectorLabels" . }}
app.kubernetes.io/part-of: kubestellar-rs
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* repository:tag, the tag defaulting to the chart's appVersion. Argument: (list $ .image). */}}
{{- define "ks-status-addon.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 -}}
{{- printf "%s:%s" $image.repository ($image.tag | default $root.Chart.AppVersion) -}}
{{- end -}}
