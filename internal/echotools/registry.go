// Package echotools is the one registry of Echo tools. MCP (/mcp and `fathom mcp --db`) and
// HTTP+JSON (/api/v1/tools/{name}) both call Registry.Call, so validation, behaviour and
// the shape of every answer are the same whichever transport asked.
package echotools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/fathom-gpu/fathom/internal/echostore"
)

// Scopes a bearer token can hold.
const (
	ScopeTools = "tools"
	ScopeSQL   = "sql"
)

// Sentinel errors; the API maps each to one stable status code.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrUnknownTool     = errors.New("unknown tool")
	// ErrBusy: every SQL slot is taken; retry shortly.
	ErrBusy = errors.New("too many concurrent queries")
)

// Tool is one read-only tool.
type Tool struct {
	Name         string
	Title        string
	Description  string
	Scope        string
	InputSchema  *jsonschema.Schema
	OutputSchema *jsonschema.Schema

	input *jsonschema.Resolved
	call  func(ctx context.Context, raw json.RawMessage) (any, error)
}

// Env is what tools read: the store and the limits the operator configured.
type Env struct {
	Store     *echostore.Store
	SQLLimits echostore.QueryLimits
	// SQLSlots caps concurrent run_analysis/sql queries; a full channel means busy.
	SQLSlots chan struct{}
	Rates    *Rates
	Now      func() time.Time
}

// Registry holds every tool, in a stable order.
type Registry struct {
	tools  []*Tool
	byName map[string]*Tool
}

// NewRegistry builds the registry over env.
func NewRegistry(env *Env) (*Registry, error) {
	if env.Now == nil {
		env.Now = time.Now
	}
	r := &Registry{byName: map[string]*Tool{}}
	for _, build := range []func(*Env) (*Tool, error){
		eventHistoryTool, findOutlierNodesTool, clusterSummaryTool, causalChainsTool,
		traceStatsTool, stacksTool, costTool, processHostPressureTool, cudaGraphActivityTool, nodeReadinessTool, timelineTool, runAnalysisTool,
	} {
		t, err := build(env)
		if err != nil {
			return nil, err
		}
		t.call = readingStore(env.Store, t.call)
		r.tools = append(r.tools, t)
		r.byName[t.Name] = t
	}
	return r, nil
}

// readingStore runs each call of a tool as one echostore Read: the tools query
// Store.DB(), and the Read keeps Close from closing it under them. A call after Close
// began, or one Close interrupted, answers echostore.ErrClosed.
func readingStore(st *echostore.Store, call func(context.Context, json.RawMessage) (any, error)) func(context.Context, json.RawMessage) (any, error) {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var out any
		err := st.Read(ctx, func(ctx context.Context) error {
			var err error
			out, err = call(ctx, raw)
			return err
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
}

// List returns the tools in registration order.
func (r *Registry) List() []*Tool { return r.tools }

// Get finds a tool by name.
func (r *Registry) Get(name string) (*Tool, bool) {
	t, ok := r.byName[name]
	return t, ok
}

// Call validates raw against the tool's input schema, decodes it and runs the tool. A
// schema violation or a semantic one (a bad time, since after until) is
// ErrInvalidArgument, never an internal error.
func (r *Registry) Call(ctx context.Context, name string, raw json.RawMessage) (any, error) {
	t, ok := r.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	return t.Call(ctx, raw)
}

// Call runs this tool on raw JSON arguments.
func (t *Tool) Call(ctx context.Context, raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		raw = json.RawMessage("{}")
	}
	var instance any
	if err := json.Unmarshal(raw, &instance); err != nil {
		return nil, fmt.Errorf("%w: arguments are not JSON: %v", ErrInvalidArgument, err)
	}
	if err := t.input.Validate(instance); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return t.call(ctx, raw)
}

// newTool derives the schemas from In and Out, so what is documented is what is checked.
func newTool[In, Out any](name, title, desc, scope string, fn func(context.Context, In) (Out, error), tune func(*jsonschema.Schema)) (*Tool, error) {
	in, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s input schema: %w", name, err)
	}
	if tune != nil {
		tune(in)
	}
	out, err := jsonschema.For[Out](nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s output schema: %w", name, err)
	}
	// MCP clients built on the TypeScript SDK drop the whole tools/list when one tool's
	// schema is not exactly {"type": "object"}; a pointer result derives ["null","object"].
	if !isObjectSchema(in) {
		return nil, fmt.Errorf("tool %s: input schema has type %v, MCP requires \"object\": take a struct", name, schemaType(in))
	}
	if !isObjectSchema(out) {
		return nil, fmt.Errorf("tool %s: output schema has type %v, MCP requires \"object\": return a struct, not a pointer or a list", name, schemaType(out))
	}
	resolved, err := in.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s input schema: %w", name, err)
	}
	return &Tool{
		Name: name, Title: title, Description: desc, Scope: scope,
		InputSchema: in, OutputSchema: out, input: resolved,
		call: func(ctx context.Context, raw json.RawMessage) (any, error) {
			var args In
			if err := json.Unmarshal(raw, &args); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
			}
			return fn(ctx, args)
		},
	}, nil
}

// isObjectSchema: the schema's type is the single type "object", as MCP requires of a
// tool's inputSchema and outputSchema.
func isObjectSchema(s *jsonschema.Schema) bool {
	return s != nil && s.Type == "object" && len(s.Types) == 0
}

func schemaType(s *jsonschema.Schema) any {
	if len(s.Types) > 0 {
		return s.Types
	}
	return s.Type
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, a...))
}

func f64p(v float64) *float64 { return &v }

func setRange(s *jsonschema.Schema, prop string, lo, hi float64) {
	if p, ok := s.Properties[prop]; ok {
		p.Minimum, p.Maximum = f64p(lo), f64p(hi)
	}
}

func setEnum(s *jsonschema.Schema, prop string, values ...any) {
	if p, ok := s.Properties[prop]; ok {
		p.Enum = values
	}
}
