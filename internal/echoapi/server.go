package echoapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/fathom-gpu/fathom/internal/echotools"
)

// maxBodyBytes caps a request body; tool arguments and SQL are small.
const maxBodyBytes = 1 << 20

// Options configure the handler.
type Options struct {
	Registry      *echotools.Registry
	Auth          *Authenticator
	Audit         *AuditLog
	RatePerSecond float64
	Burst         int
	// Version is the full Fathom version; unauthenticated callers see major.minor.
	Version       string
	SchemaVersion int
	// LocalCaller, when set, is who every request is, with every scope and no bearer
	// token: the handler serves a Unix socket, whose file permissions already decided
	// who may connect. The audit log names the caller's uid and pid (SO_PEERCRED).
	LocalCaller string
	// Logger receives each internal error with its details, which the client is not
	// told; nil discards them.
	Logger *zap.Logger
}

// Handler serves /api/... and /mcp.
type Handler struct {
	opts     Options
	limiters map[string]*rate.Limiter // one per configured token: bounded by config
	mux      *http.ServeMux
	mcpTools []*mcp.Tool
}

type ctxKey int

const (
	principalKey ctxKey = iota
	authErrKey
)

// NewHandler wires the routes. Every route but /api/versions goes through
// identify → audit → authorize → rate limit → handler, so a refusal (401, 403) and a 429
// are audited like any answer.
func NewHandler(opts Options) *Handler {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	h := &Handler{opts: opts, limiters: map[string]*rate.Limiter{}, mux: http.NewServeMux(), mcpTools: MCPTools(opts.Registry)}
	for _, t := range opts.Auth.tokens {
		perSecond, burst := opts.RatePerSecond, opts.Burst
		if t.rate > 0 && t.burst > 0 {
			perSecond, burst = t.rate, t.burst
		}
		h.limiters[t.principal.Name] = rate.NewLimiter(rate.Limit(perSecond), burst)
	}
	if opts.LocalCaller != "" {
		h.limiters[opts.LocalCaller] = rate.NewLimiter(rate.Limit(opts.RatePerSecond), opts.Burst)
	}
	mcpServer := NewMCPServer(opts.Registry, opts.Version, h.authorizeMCP, opts.Audit, opts.Logger)
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcpServer },
		// Stateless: no per-client session table to grow; JSON answers, no streams.
		&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: maxBodyBytes})

	anyToken := func(*http.Request) string { return "" }
	fixed := func(s string) func(*http.Request) string { return func(*http.Request) string { return s } }
	h.mux.HandleFunc("GET /api/versions", h.versions)
	h.mux.Handle("GET /api/v1/health", h.chain(nil, h.health))
	h.mux.Handle("GET /api/v1/tools/list", h.chain(fixed(echotools.ScopeTools), h.listTools))
	h.mux.Handle("POST /api/v1/tools/{name}", h.chain(h.toolScope, h.callTool))
	h.mux.Handle("POST /api/v1/sql", h.chain(fixed(echotools.ScopeSQL), h.sql))
	h.mux.Handle("GET /api/v1/openapi.json", h.chain(anyToken, h.openAPI))
	h.mux.Handle("/mcp", h.chain(anyToken, mcpHandler.ServeHTTP))
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// chain: scope nil means authentication is optional (health).
func (h *Handler) chain(scope func(*http.Request) string, next http.HandlerFunc) http.Handler {
	return h.identify(h.audit(h.authorize(scope, h.rateLimit(next))))
}

func (h *Handler) identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if h.opts.LocalCaller != "" {
			ctx = context.WithValue(ctx, principalKey, &Principal{Name: h.opts.LocalCaller, Scopes: allScopes})
			next.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		if header := r.Header.Get("Authorization"); header != "" {
			p, err := h.opts.Auth.Verify(header)
			if err != nil {
				ctx = context.WithValue(ctx, authErrKey, err)
			} else {
				ctx = context.WithValue(ctx, principalKey, p)
			}
		} else {
			ctx = context.WithValue(ctx, authErrKey, ErrUnauthenticated)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	code   string
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (h *Handler) audit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		remote := r.RemoteAddr
		if peer, ok := r.Context().Value(peerKey).(string); ok {
			remote = peer
		}
		entry := AuditEntry{Transport: "http", Remote: remote, Method: r.Method, Path: r.URL.Path,
			Tool: r.PathValue("name"), Status: rec.status, Code: rec.code}
		if p, ok := r.Context().Value(principalKey).(*Principal); ok {
			entry.Principal = p.Name
		}
		h.opts.Audit.Record(entry, started)
	})
}

func recorderOf(w http.ResponseWriter) *statusRecorder {
	rec, _ := w.(*statusRecorder)
	return rec
}

// fail answers err. An internal error's details go to the log only: the client gets
// "internal error", as its text may name files, SQL or a stack.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	_, code := classify(err)
	if rec := recorderOf(w); rec != nil {
		rec.code = code
	}
	if code == "internal" {
		logInternal(h.opts.Logger, "http", r.PathValue("name"), principalOf(r), err, zap.String("path", r.URL.Path))
	}
	writeError(w, err)
}

func principalOf(r *http.Request) string {
	if p, ok := r.Context().Value(principalKey).(*Principal); ok {
		return p.Name
	}
	return ""
}

func (h *Handler) authorize(scope func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if scope == nil { // optional authentication: only a wrong token is refused
			if err, ok := r.Context().Value(authErrKey).(error); ok && r.Header.Get("Authorization") != "" {
				h.fail(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if err, ok := r.Context().Value(authErrKey).(error); ok {
			h.fail(w, r, err)
			return
		}
		p := r.Context().Value(principalKey).(*Principal)
		if need := scope(r); need != "" && !p.Scopes[need] {
			h.fail(w, r, errorf(ErrForbidden, "token %q lacks scope %q", p.Name, need))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) rateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := r.Context().Value(principalKey).(*Principal); ok {
			if l := h.limiters[p.Name]; l != nil && !l.Allow() {
				h.fail(w, r, errorf(ErrRateLimited, "%s may make %g requests per second (burst %d)", p.Name, float64(l.Limit()), l.Burst()))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func errorf(sentinel error, format string, a ...any) error {
	return &wrapped{sentinel: sentinel, msg: sentinel.Error() + ": " + fmt.Sprintf(format, a...)}
}

type wrapped struct {
	sentinel error
	msg      string
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.sentinel }

func (h *Handler) toolScope(r *http.Request) string {
	if t, ok := h.opts.Registry.Get(r.PathValue("name")); ok {
		return t.Scope
	}
	return echotools.ScopeTools
}

func (h *Handler) authorizeMCP(header http.Header, scope string) (string, error) {
	if h.opts.LocalCaller != "" {
		return h.opts.LocalCaller, nil
	}
	p, err := h.opts.Auth.Verify(header.Get("Authorization"))
	if err != nil {
		return "", err
	}
	if !p.Scopes[scope] {
		return p.Name, errorf(ErrForbidden, "token %q lacks scope %q", p.Name, scope)
	}
	return p.Name, nil
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

// versions needs no token: clients discover the API before they have one.
func (h *Handler) versions(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"versions": []string{"v1"}, "fathom": majorMinor(h.opts.Version)})
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	body := map[string]any{"status": "ok"}
	if _, ok := r.Context().Value(principalKey).(*Principal); ok {
		body["version"] = h.opts.Version
		body["schema_version"] = h.opts.SchemaVersion
	}
	writeJSON(w, http.StatusOK, body)
}

func (h *Handler) listTools(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"tools": h.mcpTools})
}

func readBody(w http.ResponseWriter, r *http.Request) (json.RawMessage, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		return nil, errorf(ErrBadRequest, "request body: %v", err)
	}
	return body, nil
}

func (h *Handler) callTool(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := runTool(func() (any, error) { return h.opts.Registry.Call(r.Context(), r.PathValue("name"), body) })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// sql is run_analysis by another path: same validation, same answer.
func (h *Handler) sql(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := runTool(func() (any, error) { return h.opts.Registry.Call(r.Context(), "run_analysis", body) })
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// allScopes are what a LocalCaller holds.
var allScopes = map[string]bool{echotools.ScopeTools: true, echotools.ScopeSQL: true}

// peerKey holds "unix uid=U pid=P" for a request over a Unix socket, the audit log's
// remote: a socket has no address, and its caller is whoever the kernel says.
const peerKey ctxKey = authErrKey + 1

// Serve runs the handler on l until Shutdown; onError hears why it stopped otherwise.
func Serve(l net.Listener, h http.Handler, onError func(error)) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ConnContext:       peerOf,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			onError(err)
		}
	}()
	return srv
}
