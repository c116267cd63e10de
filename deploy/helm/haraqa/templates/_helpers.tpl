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

{{/* The Secret of tls: the one named, else the one certManager makes (certificate.yaml). */}}
{{- define "haraqa.tlsSecret" -}}
{{- .Values.tls.secretName | default (printf "%s-tls" (include "haraqa.fullname" . | trunc 59 | trimSuffix "-")) -}}
{{- end -}}

{{/* "true" when the pods mount the auth Secret: for the auth file, or for a cluster's shared secret. */}}
{{- define "haraqa.authMounted" -}}
{{- if or .Values.auth.enabled (include "haraqa.cluster" .) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the pods form one cluster (cluster.enabled, more than one pod), else "". */}}
{{- define "haraqa.cluster" -}}
{{- if and .Values.cluster.enabled (gt (int .Values.replicas) 1) -}}true{{- end -}}
{{- end -}}

{{/*
A pod's name under the headless Service, as it listens (-listen) and as -peers
names it: a server finds itself among -peers by its -listen and -tcp spelt
exactly as its entry (broker/server/cluster.go). The kubelet writes this name
into the pod's /etc/hosts. Called with (list $ "POD").
*/}}
{{- define "haraqa.podHost" -}}
{{- $ := index . 0 -}}
{{- printf "%s.%s.$(POD_NAMESPACE).svc.%s" (index . 1) (include "haraqa.headless" $) $.Values.clusterDomain -}}
{{- end -}}

{{/* -peers: every pod, host:port/httpport/clusterport, in ordinal order. */}}
{{- define "haraqa.peers" -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $pod := printf "%s-%d" (include "haraqa.fullname" $) $i -}}
{{- $peers = append $peers (printf "%s:14353/4353/14355" (include "haraqa.podHost" (list $ $pod))) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}
