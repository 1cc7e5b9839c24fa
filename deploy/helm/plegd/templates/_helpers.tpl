{{/*
A manifest of deploy/ (the chart's files/ links to deploy/base, deploy/components and
deploy/full), in the release's namespace: the kustomize install and the chart share one source.
Call with (dict "root" $ "path" "base/rbac.yaml").
*/}}
{{- define "plegd.file" -}}
{{- $text := .root.Files.Get (printf "files/%s" .path) -}}
{{- if not $text -}}
{{- fail (printf "the chart's files/%s is missing: install the chart from plegd's repository (deploy/helm/plegd), or a package made there" .path) -}}
{{- end -}}
{{- $text | replace "plegd-system" .root.Release.Namespace -}}
{{- end -}}

{{/* Whether plegd writes (conditions and full modes). */}}
{{- define "plegd.writes" -}}
{{- if ne .Values.statusMode "shadow" }}true{{ end -}}
{{- end -}}

{{/* Whether termination messages are read: as asked, else as the mode and the events need. */}}
{{- define "plegd.terminationMessages" -}}
{{- if kindIs "bool" .Values.terminationMessages -}}
{{- if .Values.terminationMessages }}true{{ end -}}
{{- else if or (ne .Values.statusMode "conditions") .Values.events.enabled -}}
true
{{- end -}}
{{- end -}}

{{/* The image, by digest when one is given. */}}
{{- define "plegd.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}
{{- end -}}
