// Package echoapi serves the Echo tools over HTTP+JSON and MCP (Streamable HTTP at /mcp,
// stdio for `fathom mcp --db`), behind bearer-token auth with scopes, an audit log and a
// per-caller rate limit.
package echoapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/echotools"
)

// Refusals of the API itself; tool and store errors are classified alongside them.
var (
	ErrUnauthenticated = errors.New("missing or unknown bearer token")
	ErrForbidden       = errors.New("token lacks the scope this needs")
	ErrRateLimited     = errors.New("rate limit exceeded")
	ErrBadRequest      = errors.New("bad request")
)

// classification maps each sentinel to one HTTP status and a stable code that MCP
// error texts carry too. Anything unclassified is an internal error.
var classification = []struct {
	err    error
	status int
	code   string
}{
	{ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated"},
	{ErrForbidden, http.StatusForbidden, "forbidden"},
	{ErrRateLimited, http.StatusTooManyRequests, "rate_limited"},
	{ErrBadRequest, http.StatusBadRequest, "bad_request"},
	{echotools.ErrInvalidArgument, http.StatusBadRequest, "invalid_argument"},
	{echotools.ErrUnknownTool, http.StatusNotFound, "unknown_tool"},
	{echotools.ErrBusy, http.StatusServiceUnavailable, "busy"},
	{echostore.ErrNotReadOnly, http.StatusBadRequest, "not_read_only"},
	{echostore.ErrQueryFailed, http.StatusBadRequest, "query_failed"},
	{echostore.ErrResultTooLarge, http.StatusUnprocessableEntity, "result_too_large"},
	{echostore.ErrQueryTimeout, http.StatusGatewayTimeout, "query_timeout"},
	// The collector is stopping: a client that retries reaches it, or its successor,
	// once it is back.
	{echostore.ErrClosed, http.StatusServiceUnavailable, "store_closed"},
}

func classify(err error) (int, string) {
	for _, c := range classification {
		if errors.Is(err, c.err) {
			return c.status, c.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// logInternal keeps an internal error's details in the log, where the operator looks
// for what the client was told only "internal error" about.
func logInternal(logger *zap.Logger, transport, tool, principal string, err error, fields ...zap.Field) {
	logger.Error("Echo API internal error", append([]zap.Field{zap.String("transport", transport),
		zap.String("tool", tool), zap.String("principal", principal), zap.Error(err)}, fields...)...)
}

// ErrorBody is the JSON of every HTTP error answer.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, err error) {
	status, code := classify(err)
	var body ErrorBody
	body.Error.Code = code
	body.Error.Message = err.Error()
	if status == http.StatusInternalServerError {
		// Internal details stay in the log, not in the answer.
		body.Error.Message = "internal error"
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
