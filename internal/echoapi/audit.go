package echoapi

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// AuditEntry is one line of the audit log: every request, refusals included, and
// every MCP tool call.
type AuditEntry struct {
	Time       string `json:"time"`
	Transport  string `json:"transport"`
	Principal  string `json:"principal"`
	Remote     string `json:"remote,omitempty"`
	Method     string `json:"method,omitempty"`
	Path       string `json:"path,omitempty"`
	Tool       string `json:"tool,omitempty"`
	Status     int    `json:"status"`
	Code       string `json:"code,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

// AuditLog writes JSON lines. A failed write is counted by onDrop (exported as
// internal telemetry) and never fails the request it describes.
type AuditLog struct {
	mu     sync.Mutex
	w      io.Writer
	onDrop func()
	// observe sees every entry (the extension counts them by transport and code).
	observe func(AuditEntry)
}

// NewAuditLog writes to w; onDrop and observe may be nil.
func NewAuditLog(w io.Writer, onDrop func(), observe func(AuditEntry)) *AuditLog {
	if onDrop == nil {
		onDrop = func() {}
	}
	if observe == nil {
		observe = func(AuditEntry) {}
	}
	return &AuditLog{w: w, onDrop: onDrop, observe: observe}
}

// Record writes one entry.
func (a *AuditLog) Record(e AuditEntry, started time.Time) {
	e.Time = started.UTC().Format(time.RFC3339Nano)
	e.DurationMS = time.Since(started).Milliseconds()
	if e.Principal == "" {
		e.Principal = "-"
	}
	a.observe(e)
	line, err := json.Marshal(e)
	if err != nil {
		a.onDrop()
		return
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(line); err != nil {
		a.onDrop()
	}
}
