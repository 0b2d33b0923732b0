{{/* The release's full name: the release name, or release-chart when it lacks the chart's name. */}}
{{- define "sandgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sandgate.gatewayName" -}}{{ include "sandgate.fullname" . }}-gateway{{- end -}}
{{- define "sandgate.redisName" -}}{{ include "sandgate.fullname" . }}-redis{{- end -}}

{{/* Labels on every object that carries no selector's labels. */}}
{{- define "sandgate.labels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "sandgate.commonLabels" . }}
{{- end -}}

{{/* Labels on every object, beside either the instance label or a selector's labels (which hold it). */}}
{{- define "sandgate.commonLabels" -}}
app.kubernetes.io/part-of: sandgate
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The gateway pods' selector; the sandbox NetworkPolicy admits exactly these pods. */}}
{{- define "sandgate.gatewaySelector" -}}
app.kubernetes.io/name: sandgate-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sandgate.redisSelector" -}}
app.kubernetes.io/name: sandgate-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sandgate.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "sandgate.agentImage" -}}
{{ .Values.agentImage.repository }}:{{ .Values.agentImage.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Settings the chart sets itself; `settings` and `secretSettings` may not name them. */}}
{{- define "sandgate.ownedSettings" -}}
SANDGATE_RUNTIME SANDGATE_NAMESPACE SANDGATE_K8S_AGENT_IMAGE SANDGATE_REDIS_URL SANDGATE_API_KEY SANDGATE_CLUSTER_ID SANDGATE_ADMIN SANDGATE_PLUGIN_CACHE_DIR SANDGATE_KUBECONFIG SANDGATE_METRICS_LISTEN
{{- end -}}
