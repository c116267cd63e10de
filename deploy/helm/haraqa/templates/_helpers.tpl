{{/* The name of every object: the release name, or release-chart when they differ. */}}
{{- define "haraqa.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "haraqa.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "haraqa.labels" -}}
{{ include "haraqa.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "haraqa.headless" -}}
{{- printf "%s-headless" (include "haraqa.fullname" . | trunc 54 | trimSuffix "-") -}}
{{- end -}}

{{/* The Secret holding the auth file: the one named, else the one the chart makes (secret.yaml). */}}
{{- define "haraqa.authSecret" -}}
{{- .Values.auth.secretName | default (printf "%s-auth" (include "haraqa.fullname" . | trunc 58 | trimSuffix "-")) -}}
{{- end -}}
