{{/* Image reference "<repository>/<image>:<version>" of a component's values. */}}
{{- define "gpu-operator.image" -}}
{{- printf "%s/%s:%s" .repository .image (toString .version) -}}
{{- end -}}

{{- define "gpu-operator.labels" -}}
app.kubernetes.io/name: gpu-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
One operand DaemonSet as the operator renders it (GO@v26.7.0 assets/state-NAME/NNNN_daemonset.yaml):
real name, pod label app=<name>, nodeSelector nvidia.com/gpu.deploy.<deploy>=true, the
daemonsets.* tolerations and priority class. Call with (dict "root" $ "name" .. "deploy" ..
"component" <values of the component> "env" <list>).
*/}}
{{- define "gpu-operator.operand" -}}
{{- $root := .root -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app: {{ .name }}
    app.kubernetes.io/part-of: gpu-operator
    {{- include "gpu-operator.labels" $root | nindent 4 }}
    {{- with $root.Values.daemonsets.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      app: {{ .name }}
  updateStrategy:
    type: {{ $root.Values.daemonsets.updateStrategy }}
    {{- if eq $root.Values.daemonsets.updateStrategy "RollingUpdate" }}
    rollingUpdate:
      {{- /* int-or-string: a plain number must be an int, "N%" a string (the operator converts it the same way) */}}
      {{- $max := toString $root.Values.daemonsets.rollingUpdate.maxUnavailable }}
      maxUnavailable: {{ if regexMatch "^[0-9]+$" $max }}{{ $max }}{{ else }}{{ $max | quote }}{{ end }}
    {{- end }}
  template:
    metadata:
      labels:
        app: {{ .name }}
        app.kubernetes.io/part-of: gpu-operator
        {{- with $root.Values.daemonsets.labels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $root.Values.daemonsets.annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      nodeSelector:
        nvidia.com/gpu.deploy.{{ .deploy }}: "true"
        {{- range $k, $v := (.extraSelector | default dict) }}
        {{ $k }}: {{ $v | quote }}
        {{- end }}
      tolerations:
        {{- toYaml $root.Values.daemonsets.tolerations | nindent 8 }}
      {{- with $root.Values.daemonsets.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      automountServiceAccountToken: false
      containers:
        - name: {{ .container | default .name }}
          image: {{ include "gpu-operator.image" .component }}
          imagePullPolicy: {{ .component.imagePullPolicy | default "IfNotPresent" }}
          {{- $env := concat (.env | default list) (.component.env | default list) }}
          {{- with $env }}
          env:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          {{- with .component.args }}
          args:
            {{- toYaml . | nindent 12 }}
          {{- end }}
          securityContext:
            privileged: true
{{- end -}}
