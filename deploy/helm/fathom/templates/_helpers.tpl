{{/* Names and labels shared by every object of the release. */}}
{{- define "fathom.name" -}}
{{- printf "%s-fathom" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "fathom.labels" -}}
app.kubernetes.io/name: fathom
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fathom.selector" -}}
app.kubernetes.io/name: fathom
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fathom.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The gateway's OTLP/gRPC address, as the nodes dial it. */}}
{{- define "fathom.gatewayAddress" -}}
{{ include "fathom.name" . }}-gateway.{{ .Release.Namespace }}.svc:4317
{{- end -}}
