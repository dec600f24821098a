package echoapi

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/fathom-gpu/fathom/internal/echotools"
)

// jsonObject keeps the document's literal maps short.
type jsonObject = map[string]any

// What a route can answer besides 200, by what it does before its handler runs. The
// conformance test (test/mcpconformance/openapi.mjs) calls every documented route and
// fails on any status or body the document does not name, so these sets are checked.
var (
	// identify → audit → authorize → rate limit: any route that takes a token.
	authenticatedStatuses = []int{http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusInternalServerError}
	// authorize with a scope.
	scopedStatuses = []int{http.StatusForbidden}
	// A tool call: its arguments (400) and what the store may refuse; a documented tool's
	// route never answers 404, that is only for names the registry lacks.
	toolStatuses = []int{http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusServiceUnavailable, http.StatusGatewayTimeout}
)

var statusMeaning = map[int]string{
	http.StatusBadRequest:          "invalid arguments or request body (bad_request, invalid_argument, not_read_only, query_failed)",
	http.StatusUnauthorized:        "missing, malformed or unknown bearer token (unauthenticated)",
	http.StatusForbidden:           "the token lacks the scope this needs (forbidden)",
	http.StatusUnprocessableEntity: "the result is over the configured byte cap (result_too_large)",
	http.StatusTooManyRequests:     "the token's rate limit is exceeded (rate_limited); retry after Retry-After seconds",
	http.StatusInternalServerError: "internal error; the details are in the gateway's log (internal)",
	http.StatusServiceUnavailable:  "every SQL slot is taken (busy), or the collector is stopping (store_closed); retry after Retry-After seconds",
	http.StatusGatewayTimeout:      "the query ran past the configured timeout (query_timeout)",
}

// openAPI describes the HTTP API from the same registry that serves it, so the document
// cannot drift from the tools: one operation per tool, its request body the tool's input
// schema and its 200 body the tool's output schema (byte-for-byte MCP's).
func (h *Handler) openAPI(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, h.openAPIDocument())
}

func (h *Handler) openAPIDocument() jsonObject {
	sqlResult := any(jsonObject{"type": "object"})
	if t, ok := h.opts.Registry.Get("run_analysis"); ok {
		sqlResult = t.OutputSchema
	}
	paths := jsonObject{
		"/api/versions": jsonObject{"get": jsonObject{
			"operationId": "getVersions", "summary": "API versions and Fathom's major.minor; needs no token",
			"security":  []any{},
			"responses": jsonObject{"200": jsonResponse("versions", ref("Versions"))},
		}},
		"/api/v1/health": jsonObject{"get": jsonObject{
			"operationId": "getHealth", "summary": "liveness; with a valid token also the version and schema version",
			// An empty requirement makes the token optional; a wrong one is still refused.
			"security":  []any{jsonObject{}, jsonObject{"bearer": []any{}}},
			"responses": responses(jsonResponse("ok", ref("Health")), authenticatedStatuses),
		}},
		"/api/v1/openapi.json": jsonObject{"get": jsonObject{
			"operationId": "getOpenAPI", "summary": "this document; any valid token",
			"responses": responses(jsonResponse("OpenAPI 3.1 document", jsonObject{
				"type": "object", "required": []string{"openapi", "info", "paths"},
				"properties": jsonObject{"openapi": jsonObject{"type": "string"}, "info": jsonObject{"type": "object"}, "paths": jsonObject{"type": "object"}},
			}), authenticatedStatuses),
		}},
		"/api/v1/tools/list": jsonObject{"get": jsonObject{
			"operationId": "listTools", "summary": "the tools, as MCP tools/list describes them",
			"x-scope":   echotools.ScopeTools,
			"responses": responses(jsonResponse("tools", ref("ToolList")), authenticatedStatuses, scopedStatuses),
		}},
		"/api/v1/sql": jsonObject{"post": jsonObject{
			"operationId": "runSQL", "summary": "one read-only SELECT; the same as the run_analysis tool",
			"x-scope": echotools.ScopeSQL,
			"requestBody": jsonObject{"required": true, "content": jsonObject{"application/json": jsonObject{"schema": jsonObject{
				"type": "object", "required": []string{"sql"}, "additionalProperties": false,
				"properties": jsonObject{"sql": jsonObject{"type": "string", "description": "one read-only SELECT over the events table"}},
			}}}},
			"responses": responses(jsonResponse("columns and rows", sqlResult), authenticatedStatuses, scopedStatuses, toolStatuses),
		}},
	}
	for _, t := range h.opts.Registry.List() {
		paths["/api/v1/tools/"+t.Name] = jsonObject{"post": jsonObject{
			"operationId": t.Name, "summary": t.Title, "description": t.Description,
			"x-scope": t.Scope,
			// An empty body is the empty argument object, as over MCP.
			"requestBody": jsonObject{"required": false, "content": jsonObject{"application/json": jsonObject{"schema": t.InputSchema}}},
			"responses":   responses(jsonResponse("the tool's result, as MCP returns it in structuredContent", t.OutputSchema), authenticatedStatuses, scopedStatuses, toolStatuses),
		}}
	}
	return jsonObject{
		"openapi": "3.1.0",
		"info": jsonObject{
			"title": "Fathom Echo API", "version": majorMinor(h.opts.Version),
			"description": "The Echo store's tools over HTTP+JSON: the same tools, tokens and audit log as MCP at /mcp.",
		},
		"paths": paths,
		"components": jsonObject{
			"securitySchemes": jsonObject{"bearer": jsonObject{"type": "http", "scheme": "bearer",
				"description": "A configured token; its scopes are tools (every tool but run_analysis) and sql (run_analysis, /api/v1/sql). x-scope on an operation names the scope it needs."}},
			"headers": jsonObject{"Retry-After": jsonObject{"description": "seconds to wait before retrying",
				"required": true, "schema": jsonObject{"type": "integer", "minimum": 0}}},
			"schemas": jsonObject{
				"Error": jsonObject{
					"type": "object", "required": []string{"error"}, "additionalProperties": false,
					"properties": jsonObject{"error": jsonObject{
						"type": "object", "required": []string{"code", "message"}, "additionalProperties": false,
						"properties": jsonObject{
							"code":    jsonObject{"type": "string", "enum": errorCodes()},
							"message": jsonObject{"type": "string"},
						},
					}},
				},
				"Versions": jsonObject{
					"type": "object", "required": []string{"versions", "fathom"}, "additionalProperties": false,
					"properties": jsonObject{
						"versions": jsonObject{"type": "array", "items": jsonObject{"type": "string"}},
						"fathom":   jsonObject{"type": "string", "description": "major.minor"},
					},
				},
				"Health": jsonObject{
					"type": "object", "required": []string{"status"}, "additionalProperties": false,
					"properties": jsonObject{
						"status":         jsonObject{"const": "ok"},
						"version":        jsonObject{"type": "string", "description": "only with a valid token"},
						"schema_version": jsonObject{"type": "integer", "description": "only with a valid token"},
					},
				},
				"ToolList": jsonObject{
					"type": "object", "required": []string{"tools"}, "additionalProperties": false,
					"properties": jsonObject{"tools": jsonObject{"type": "array", "items": jsonObject{
						"type": "object", "required": []string{"name", "inputSchema"},
						"properties": jsonObject{
							"name":         jsonObject{"type": "string"},
							"title":        jsonObject{"type": "string"},
							"description":  jsonObject{"type": "string"},
							"inputSchema":  jsonObject{"type": "object", "properties": jsonObject{"type": jsonObject{"const": "object"}}},
							"outputSchema": jsonObject{"type": "object", "properties": jsonObject{"type": jsonObject{"const": "object"}}},
							"annotations":  jsonObject{"type": "object"},
						},
					}}},
				},
			},
		},
		"security": []any{jsonObject{"bearer": []any{}}},
	}
}

func ref(schema string) jsonObject { return jsonObject{"$ref": "#/components/schemas/" + schema} }

func jsonResponse(description string, schema any) jsonObject {
	return jsonObject{"description": description, "content": jsonObject{"application/json": jsonObject{"schema": schema}}}
}

// responses is 200 plus an Error answer for each status the route can give.
func responses(ok jsonObject, statusSets ...[]int) jsonObject {
	out := jsonObject{"200": ok}
	for _, set := range statusSets {
		for _, status := range set {
			r := jsonResponse(statusMeaning[status], ref("Error"))
			if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
				r["headers"] = jsonObject{"Retry-After": jsonObject{"$ref": "#/components/headers/Retry-After"}}
			}
			out[strconv.Itoa(status)] = r
		}
	}
	return out
}

// errorCodes are the codes an Error body can carry: the classification's and internal.
func errorCodes() []string {
	seen := map[string]bool{"internal": true}
	for _, c := range classification {
		seen[c.code] = true
	}
	codes := make([]string, 0, len(seen))
	for c := range seen {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	return codes
}
