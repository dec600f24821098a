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

{{/* The gateway service's names: what the nodes dial, and what its certificates name.
The headless service's pod names are there for a cohort shard addressed by pod. */}}
{{- define "fathom.gatewayDNSNames" -}}
{{- $svc := printf "%s-gateway" (include "fathom.name" .) -}}
{{- $headless := printf "%s-gateway-headless" (include "fathom.name" .) -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) (printf "*.%s.%s.svc" $headless $ns) (printf "*.%s.%s.svc.cluster.local" $headless $ns) | toJson -}}
{{- end -}}

{{/* How the nodes and the gateway get their OTLP certificates (values.otlpTLS): one of
insecure, certManager, existingSecrets, perNode, or generated when none is set. Two set
at once is a mistake the chart names rather than one it guesses past. */}}
{{- define "fathom.otlpTLS.mode" -}}
{{- $t := .Values.otlpTLS -}}
{{- $modes := list -}}
{{- if $t.insecure }}{{ $modes = append $modes "insecure" }}{{ end -}}
{{- if $t.certManager.issuerRef }}{{ $modes = append $modes "certManager" }}{{ end -}}
{{- if or $t.existingSecrets.gateway $t.existingSecrets.node }}{{ $modes = append $modes "existingSecrets" }}{{ end -}}
{{- if $t.perNode.hostPath }}{{ $modes = append $modes "perNode" }}{{ end -}}
{{- if gt (len $modes) 1 -}}
{{- fail (printf "otlpTLS: %s are all set, and each chooses where the OTLP certificates come from (insecure: that there are none); set one" (join " and " $modes)) -}}
{{- end -}}
{{- $mode := $modes | first | default "generated" -}}
{{- if and (eq $mode "certManager") (not $t.certManager.issuerRef.name) -}}
{{- fail "otlpTLS.certManager.issuerRef needs a name: the cert-manager Issuer or ClusterIssuer (a CA issuer) that signs the OTLP certificates" -}}
{{- end -}}
{{- if and (eq $mode "existingSecrets") .Values.gateway.enabled (not $t.existingSecrets.gateway) -}}
{{- fail "otlpTLS.existingSecrets needs gateway too: a secret with ca.crt, tls.crt and tls.key for the gateway's OTLP listeners, from the same CA as the nodes' secret" -}}
{{- end -}}
{{- if and (eq $mode "existingSecrets") .Values.node.enabled (not $t.existingSecrets.node) -}}
{{- fail "otlpTLS.existingSecrets needs node too: a secret with ca.crt, tls.crt and tls.key the node collectors share, from the same CA as the gateway's secret" -}}
{{- end -}}
{{- if and (eq $mode "perNode") (not $t.perNode.gatewaySecret) -}}
{{- fail "otlpTLS.perNode.hostPath needs otlpTLS.perNode.gatewaySecret: a secret with the gateway's ca.crt, tls.crt and tls.key, whose ca.crt is the CA that signed the nodes' certificates" -}}
{{- end -}}
{{- $mode -}}
{{- end -}}

{{/* The secret the gateway's OTLP listeners read their certificate from. */}}
{{- define "fathom.otlpTLS.gatewaySecret" -}}
{{- $mode := include "fathom.otlpTLS.mode" . -}}
{{- if eq $mode "perNode" -}}{{ .Values.otlpTLS.perNode.gatewaySecret }}
{{- else if eq $mode "existingSecrets" -}}{{ .Values.otlpTLS.existingSecrets.gateway }}
{{- else -}}{{ include "fathom.name" . }}-otlp-gateway
{{- end -}}
{{- end -}}

{{/* The secret every node collector shares (none with per-node certificates). */}}
{{- define "fathom.otlpTLS.nodeSecret" -}}
{{- if eq (include "fathom.otlpTLS.mode" .) "existingSecrets" -}}{{ .Values.otlpTLS.existingSecrets.node }}
{{- else -}}{{ include "fathom.name" . }}-otlp-node
{{- end -}}
{{- end -}}

{{/* The generated CA and certificates, made once per render (every template that asks
gets the same ones): the CA kept in <name>-otlp-ca across upgrades, each certificate
kept until its last 30 days or until the CA that signed it is gone. Returns nothing;
the result is in .Values._otlpTLSGenerated (cert, key, notAfter per name, ca). */}}
{{- define "fathom.otlpTLS.generate" -}}
{{- if not (hasKey .Values "_otlpTLSGenerated") -}}
{{- $ns := .Release.Namespace -}}
{{- $base := include "fathom.name" . -}}
{{- $old := lookup "v1" "Secret" $ns (printf "%s-otlp-ca" $base) -}}
{{- $oldData := $old.data | default dict -}}
{{- $ca := dict -}}
{{- if and (index $oldData "tls.crt") (index $oldData "tls.key") -}}
{{- $ca = buildCustomCert (index $oldData "tls.crt") (index $oldData "tls.key") -}}
{{- else -}}
{{- $ca = genCA "fathom-otlp-ca" 3650 -}}
{{- end -}}
{{- $now := now | unixEpoch | atoi -}}
{{- $days := int .Values.otlpTLS.generated.days -}}
{{- $made := dict "ca" (dict "cert" $ca.Cert "key" $ca.Key) -}}
{{- $svc := printf "%s-gateway" $base -}}
{{- $leaves := dict "gateway" (list $svc (include "fathom.gatewayDNSNames" . | fromJsonArray)) "node" (list .Values.otlpTLS.nodeCommonName list) -}}
{{- range $role, $subject := $leaves -}}
{{- $old := lookup "v1" "Secret" $ns (printf "%s-otlp-%s" $base $role) -}}
{{- $oldData := $old.data | default dict -}}
{{- $notAfter := index ($old.metadata | default dict) "annotations" | default dict | dig "fathom-gpu.github.io/not-after" "0" | atoi -}}
{{- if and (eq (index $oldData "ca.crt" | default "") ($ca.Cert | b64enc)) (index $oldData "tls.crt") (index $oldData "tls.key") (gt $notAfter (add $now (mul 30 86400))) -}}
{{- $_ := set $made $role (dict "cert" (index $oldData "tls.crt" | b64dec) "key" (index $oldData "tls.key" | b64dec) "notAfter" $notAfter) -}}
{{- else -}}
{{- $cert := genSignedCert (index $subject 0) nil (index $subject 1) $days $ca -}}
{{- $_ := set $made $role (dict "cert" $cert.Cert "key" $cert.Key "notAfter" (add $now (mul $days 86400))) -}}
{{- end -}}
{{- end -}}
{{- $_ := set .Values "_otlpTLSGenerated" $made -}}
{{- end -}}
{{- end -}}
