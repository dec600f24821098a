// Package echosockettest serves the Echo API over a planted store on a real Unix
// socket, the way a standalone collector's echo extension does, for the tests of what
// talks to that socket (the socket's own client, `fathom mcp --socket`'s relay).
package echosockettest

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/echoapi"
	"github.com/fathom-gpu/fathom/internal/echosocket"
	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/echotools"
	"github.com/fathom-gpu/fathom/internal/testsupport/echostoretest"
)

// Server is the API on the socket at Path, over echostoretest's planted rows.
type Server struct {
	Path     string
	listener *echosocket.Listener
	http     *http.Server
	stopOnce sync.Once

	mu      sync.Mutex
	audited []echoapi.AuditEntry
}

// ServePlanted serves the tools over a store planted at plantedAt on a socket at path
// (mode 0600), with every scope for the socket's caller as the extension grants it. It
// stops when the test ends.
func ServePlanted(t testing.TB, path string, plantedAt time.Time) *Server {
	t.Helper()
	st := echostoretest.Planted(t, plantedAt)
	env, err := echotools.NewEnv(st, echotools.DefaultSQLLimits, echotools.DefaultSQLConcurrency, "")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := echotools.NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := echoapi.NewAuthenticator(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := echosocket.Listen(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Path: path, listener: l}
	s.http = echoapi.Serve(l, echoapi.NewHandler(echoapi.Options{
		Registry: reg, Auth: auth, Audit: echoapi.NewAuditLog(s, nil, nil),
		RatePerSecond: 1000, Burst: 1000, Version: "0.4.2", SchemaVersion: echostore.SchemaVersion,
		LocalCaller: "local",
	}), func(err error) { t.Errorf("the Echo socket stopped: %v", err) })
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping the Echo socket: %v", err)
		}
	})
	return s
}

// Stop shuts the API down as a collector does at exit: the socket is closed and its
// file removed.
func (s *Server) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = s.http.Shutdown(ctx)
		// Shutdown closes the listener, which removes the file; a second close only
		// makes sure of it.
		if cerr := s.listener.Close(); cerr != nil && err == nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
	})
	return err
}

// Audited is every audit line the API wrote so far.
func (s *Server) Audited() []echoapi.AuditEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.audited)
}

// Write takes the API's audit lines, one JSON object a call.
func (s *Server) Write(line []byte) (int, error) {
	var e echoapi.AuditEntry
	if err := json.Unmarshal(line, &e); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audited = append(s.audited, e)
	return len(line), nil
}
