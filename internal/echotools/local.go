package echotools

import (
	"context"
	"encoding/json"

	"github.com/fathom-gpu/fathom/internal/echostore"
)

// Local is the tools over a private copy of a store file, under the default SQL
// bounds: what `fathom mcp --db` serves and `fathom explain --db` asks.
type Local struct {
	st  *echostore.Store
	reg *Registry
}

// OpenLocal opens a copy of the store file at dbPath (see echostore.OpenCopy; the
// original may belong to a running gateway) and builds the tools over it.
func OpenLocal(ctx context.Context, dbPath, ratesFile string) (*Local, error) {
	st, err := echostore.OpenCopy(ctx, dbPath)
	if err != nil {
		return nil, err
	}
	l := &Local{st: st}
	env, err := NewEnv(st, DefaultSQLLimits, DefaultSQLConcurrency, ratesFile)
	if err == nil {
		l.reg, err = NewRegistry(env)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Registry is every tool over the copy, for a transport to serve.
func (l *Local) Registry() *Registry { return l.reg }

// Call runs one tool with its JSON arguments and answers its JSON result.
func (l *Local) Call(ctx context.Context, tool string, args map[string]any) (json.RawMessage, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	out, err := l.reg.Call(ctx, tool, raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// Close closes the copy and removes it.
func (l *Local) Close() {
	l.st.Close()
}
