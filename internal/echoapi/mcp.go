package echoapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/fathom-gpu/fathom/internal/echostore"
	"github.com/fathom-gpu/fathom/internal/echotools"
)

// Authorize decides whether the caller behind an MCP request may run a tool of the
// given scope, and names it for the audit log. Over HTTP it re-reads the bearer token
// from the request headers; over stdio (a local, offline copy) everything is allowed.
type Authorize func(header http.Header, scope string) (principal string, err error)

// AllowLocal is the Authorize of `fathom mcp --db`: the caller started the process.
func AllowLocal(http.Header, string) (string, error) { return "local", nil }

// SchemaURI is the MCP resource holding the store's schema.
const SchemaURI = "echo://schema"

// MCPTools turns the registry into MCP tool descriptions; GET /api/v1/tools/list
// serves the very same list.
func MCPTools(reg *echotools.Registry) []*mcp.Tool {
	var out []*mcp.Tool
	notOpenWorld := false
	for _, t := range reg.List() {
		out = append(out, &mcp.Tool{
			Name: t.Name, Title: t.Title, Description: t.Description,
			InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
			Annotations: &mcp.ToolAnnotations{Title: t.Title, ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &notOpenWorld},
		})
	}
	return out
}

// NewMCPServer builds the MCP server over the registry: every tool, the `investigate`
// prompt and the schema resource. logger receives each internal error's details, which
// the caller is told only as "internal error"; nil discards them.
func NewMCPServer(reg *echotools.Registry, version string, authorize Authorize, audit *AuditLog, logger *zap.Logger) *mcp.Server {
	if logger == nil {
		logger = zap.NewNop()
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "fathom-echo", Title: "Fathom Echo store", Version: version},
		&mcp.ServerOptions{Instructions: "Fathom's Echo store: events and metrics of a GPU cluster. Start with the investigate prompt or cluster_summary."})
	for _, desc := range MCPTools(reg) {
		tool, _ := reg.Get(desc.Name)
		srv.AddTool(desc, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			started := time.Now()
			var header http.Header
			if req.Extra != nil {
				header = req.Extra.Header
			}
			entry := AuditEntry{Transport: "mcp", Tool: tool.Name, Status: http.StatusOK}
			defer func() { audit.Record(entry, started) }()
			principal, err := authorize(header, tool.Scope)
			entry.Principal = principal
			var result any
			if err == nil {
				result, err = runTool(func() (any, error) { return tool.Call(ctx, req.Params.Arguments) })
			}
			var text []byte
			if err == nil {
				text, err = json.Marshal(result)
			}
			if err != nil {
				entry.Status, entry.Code = classify(err)
				if entry.Code == "internal" {
					logInternal(logger, "mcp", tool.Name, principal, err)
				}
				return toolError(err), nil
			}
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: string(text)}},
				StructuredContent: json.RawMessage(text),
			}, nil
		})
	}
	srv.AddPrompt(&mcp.Prompt{
		Name:        "investigate",
		Title:       "Investigate a slow GPU cluster",
		Description: "A first look: which cluster, which nodes lag, why, and what it costs.",
		Arguments: []*mcp.PromptArgument{
			{Name: "cluster", Description: "cluster to look at (fathom.cluster.name); empty for all"},
			{Name: "window", Description: "how far back to look, e.g. 30m; default 1h"},
		},
	}, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		cluster, window := req.Params.Arguments["cluster"], req.Params.Arguments["window"]
		if window == "" {
			window = "1h"
		}
		scope := "all clusters"
		if cluster != "" {
			scope = "cluster " + cluster
		}
		return &mcp.GetPromptResult{
			Description: "First look at " + scope,
			Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: fmt.Sprintf(investigatePrompt, scope, window)}}},
		}, nil
	})
	srv.AddResource(&mcp.Resource{URI: SchemaURI, Name: "schema", Title: "Echo store schema", MIMEType: "text/plain",
		Description: "DDL of the events table and what each column holds."},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: SchemaURI, MIMEType: "text/plain", Text: echostore.SchemaDDL() + columnNotes}}}, nil
		})
	return srv
}

// runTool runs one tool call so that a panic in it is that call's internal error. The
// MCP SDK runs tool handlers on goroutines of its own that do not recover, so a tool
// that panicked (a store closed under it, a nil the tool did not expect) ended the whole
// collector or `fathom mcp`; over HTTP, net/http dropped the connection with no answer
// and no audit line.
func runTool(call func() (any, error)) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the tool panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return call()
}

func toolError(err error) *mcp.CallToolResult {
	_, code := classify(err)
	msg := err.Error()
	if code == "internal" {
		msg = "internal error"
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: code + ": " + msg}}}
}

const investigatePrompt = `You are investigating why training on %[1]s is slow, over the last %[2]s. Use the Echo tools, read-only:
1. cluster_summary (since: %[2]s): which clusters, how many nodes and ranks report, errors, causal chains, busiest signals.
2. find_outlier_nodes on the collective and kernel duration signals you saw (nccl.*.duration, cuda.*.duration), by node and then by rank: who lags the median, by how much.
3. get_causal_chains for the outlier nodes: the host cause (run-queue wait and who took the CPU, a lock or the GIL and who held it, page faults, block I/O, TCP retransmits) and the suggested fix.
4. get_trace_stats for the outlier nodes against a healthy one: which CUDA/NCCL API's tail moved.
5. get_stacks for the outlier nodes and that API: which line of the Python program the slow calls came from.
6. get_cost for the worst signal: what the stragglers cost.
7. event_history or run_analysis (one SELECT, see the echo://schema resource) for anything still unexplained.
Answer with: the straggling nodes/ranks, the evidence (numbers), the likely root cause and the program line it shows at, the fix, and the cost.`

const columnNotes = `
-- ts: point or record time (UTC). kind: log | gauge | sum | histogram | exp_histogram | summary.
-- cluster, node, job, cohort, rank, local_rank, world_size, pid, process, thread_id, api (cuda.api.name or nccl.op),
-- comm_id: lifted from resource/record attributes. name: metric name or log event name.
-- value: gauge/sum value, histogram mean, or numeric log body. count/sum/min/max/p50/p95/p99: histogram summary (of the point:
-- a cumulative point holds its series' whole history). start_ts: OTLP start time (when a cumulative series began).
-- scale, bucket_offset, zero_count, bucket_counts: exponential histogram buckets; explicit_bounds + bucket_counts: explicit ones.
-- attributes: JSON object of every other attribute, e.g. json_extract_string(attributes, '$."cloud.provider"').
`
