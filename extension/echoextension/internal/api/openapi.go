package api

import (
	"net/http"
)

// openAPI describes the HTTP API from the same registry that serves it, so the document
// cannot drift from the tools.
func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	errResp := func(desc string) map[string]any {
		return map[string]any{"description": desc, "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}}
	}
	standardErrors := map[string]any{
		"400": errResp("invalid arguments"), "401": errResp("missing or unknown token"), "403": errResp("token lacks the scope"),
		"429": errResp("rate limit exceeded"), "500": errResp("internal error"),
	}
	withErrors := func(ok map[string]any) map[string]any {
		out := map[string]any{"200": ok}
		for k, v := range standardErrors {
			out[k] = v
		}
		return out
	}
	jsonBody := func(schema any) map[string]any {
		return map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	}
	paths := map[string]any{
		"/api/versions": map[string]any{"get": map[string]any{"summary": "API versions (no token)", "security": []any{},
			"responses": map[string]any{"200": map[string]any{"description": "versions"}}}},
		"/api/v1/health": map[string]any{"get": map[string]any{"summary": "liveness without a token; version with one", "security": []any{},
			"responses": map[string]any{"200": map[string]any{"description": "ok"}}}},
		"/api/v1/tools/list": map[string]any{"get": map[string]any{"summary": "the tools, as MCP tools/list describes them",
			"responses": withErrors(map[string]any{"description": "tools"})}},
		"/api/v1/sql": map[string]any{"post": map[string]any{"summary": "one read-only SELECT (scope sql); same as run_analysis",
			"requestBody": jsonBody(map[string]any{"type": "object", "required": []string{"sql"}, "properties": map[string]any{"sql": map[string]any{"type": "string"}}}),
			"responses":   withErrors(map[string]any{"description": "columns and rows"})}},
	}
	for _, t := range h.opts.Registry.List() {
		op := map[string]any{
			"summary": t.Title, "description": t.Description, "operationId": t.Name,
			"x-scope":     t.Scope,
			"requestBody": jsonBody(t.InputSchema),
			"responses":   withErrors(map[string]any{"description": "result", "content": map[string]any{"application/json": map[string]any{"schema": t.OutputSchema}}}),
		}
		paths["/api/v1/tools/"+t.Name] = map[string]any{"post": op}
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "Fathom Echo API", "version": majorMinor(h.opts.Version)},
		"paths":   paths,
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"schemas": map[string]any{"Error": map[string]any{"type": "object", "properties": map[string]any{"error": map[string]any{
				"type": "object", "properties": map[string]any{"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}}}}}},
		},
		"security": []any{map[string]any{"bearer": []any{}}},
	}
	writeJSON(w, http.StatusOK, doc)
}
