package echotools

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fathom-gpu/fathom/internal/echostore"
)

// schemaExample is one call whose real result must validate against the tool's
// outputSchema, and the list in that result whose length is known from the planted store.
type schemaExample struct {
	args    string
	list    string
	wantLen int
}

// schemaExamples holds, for every tool, a call that finds data and one that finds none
// (empty lists are where a nil slice would turn into null). A tool missing here fails
// TestEveryToolSchemaIsAnObjectAndEveryResultFitsIt.
var schemaExamples = map[string][]schemaExample{
	"event_history": {
		{`{"node":"gpu-5","limit":7}`, "events", 7},
		{`{"cluster":"none"}`, "events", 0},
	},
	"find_outlier_nodes": {
		{`{"signal":"nccl.allreduce.duration","cluster":"c1"}`, "outliers", 1},
		{`{"signal":"no.such.signal"}`, "outliers", 0},
	},
	"cluster_summary": {
		{`{}`, "clusters", 1},
		{`{"cluster":"none"}`, "clusters", 0},
	},
	"get_causal_chains": {
		{`{"cluster":"c1"}`, "chains", 3},
		{`{"cluster":"none"}`, "chains", 0},
	},
	"get_trace_stats": {
		{`{"api":"cudaMemcpy"}`, "stats", 1},
		{`{"api":"cudaNoSuchCall"}`, "stats", 0},
	},
	"get_stacks": {
		{`{"node":"gpu-1"}`, "stacks", 2},
		{`{"node":"none"}`, "stacks", 0},
	},
	"get_cost": {
		{`{"signal":"nccl.allreduce.duration"}`, "stragglers", 1},
		{`{"signal":"no.such.signal"}`, "stragglers", 0},
	},
	"process_host_pressure": {
		{`{` + processWindow + `}`, "processes", 4},
		{`{"node":"none"}`, "processes", 0},
	},
	"cuda_graph_activity": {
		{`{` + graphWindow + `}`, "processes", 3},
		{`{"node":"none"}`, "processes", 0},
	},
	"node_readiness": {
		{`{` + readinessWindow + `}`, "nodes", 5},
		{`{"node":"none"}`, "nodes", 0},
	},
	"get_timeline": {
		{`{` + timelineWindow + `}`, "traceEvents", 57},
		{`{"node":"none"}`, "traceEvents", 0},
	},
	"run_analysis": {
		{`{"sql":"SELECT node, count(*) AS n FROM events WHERE node LIKE 'gpu-%' GROUP BY node ORDER BY node"}`, "rows", 8},
		{`{"sql":"SELECT node FROM events WHERE false"}`, "rows", 0},
	},
}

// TestEveryToolSchemaIsAnObjectAndEveryResultFitsIt holds every registered tool to what
// MCP clients check: inputSchema and outputSchema are of type "object" (the TypeScript
// SDK rejects the whole tools/list otherwise), and structuredContent validates against
// the outputSchema (the SDK fails the call otherwise).
func TestEveryToolSchemaIsAnObjectAndEveryResultFitsIt(t *testing.T) {
	env := plantedStore(t)
	plantProcessActivity(t, env) // hours before plantedStore's rows: its windows do not see them
	plantGraphActivity(t, env)
	plantReadiness(t, env)
	plantTimeline(t, env)
	r, err := NewRegistry(env)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.List()) != len(schemaExamples) {
		t.Errorf("%d tools registered, %d with schema examples", len(r.List()), len(schemaExamples))
	}
	for _, tool := range r.List() {
		t.Run(tool.Name, func(t *testing.T) {
			// As a client sees them: the JSON on the wire.
			for which, s := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
				raw, err := json.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				var top map[string]any
				if err := json.Unmarshal(raw, &top); err != nil {
					t.Fatal(err)
				}
				if top["type"] != "object" {
					t.Errorf("%s type is %v, want \"object\"", which, top["type"])
				}
			}
			examples := schemaExamples[tool.Name]
			if len(examples) == 0 {
				t.Fatalf("no schema examples: add a call to schemaExamples so its results are checked")
			}
			output, err := tool.OutputSchema.Resolve(nil)
			if err != nil {
				t.Fatalf("output schema does not resolve: %v", err)
			}
			for _, ex := range examples {
				res, err := r.Call(context.Background(), tool.Name, json.RawMessage(ex.args))
				if err != nil {
					t.Fatalf("%s: %v", ex.args, err)
				}
				// structuredContent is the result's JSON, decoded as a client decodes it.
				raw, err := json.Marshal(res)
				if err != nil {
					t.Fatal(err)
				}
				var structured map[string]any
				if err := json.Unmarshal(raw, &structured); err != nil {
					t.Fatalf("%s: result is not a JSON object: %s", ex.args, raw)
				}
				if err := output.Validate(structured); err != nil {
					t.Errorf("%s: result does not fit the output schema: %v\n%s", ex.args, err, raw)
				}
				// The schemas are closed: a field the schema does not name would be a
				// drift between the Go type and what clients were promised.
				structured["not_in_the_schema"] = 1
				if err := output.Validate(structured); err == nil {
					t.Errorf("%s: a result with an undeclared field passed validation", ex.args)
				}
				list, ok := structured[ex.list].([]any)
				if !ok || len(list) != ex.wantLen {
					t.Errorf("%s: %s = %v, want a list of %d", ex.args, ex.list, structured[ex.list], ex.wantLen)
				}
			}
		})
	}
}

// TestNewToolRefusesSchemasClientsReject: a tool returning a pointer (schema
// ["null","object"]) or a list cannot be registered.
func TestNewToolRefusesSchemasClientsReject(t *testing.T) {
	noop := func(context.Context, AnalysisInput) (*echostore.QueryResult, error) { return nil, nil }
	if _, err := newTool("pointer_result", "", "", ScopeTools, noop, nil); err == nil ||
		!strings.Contains(err.Error(), `output schema has type [null object], MCP requires "object"`) {
		t.Errorf("pointer result: %v", err)
	}
	list := func(context.Context, AnalysisInput) ([]Event, error) { return nil, nil }
	if _, err := newTool("list_result", "", "", ScopeTools, list, nil); err == nil ||
		!strings.Contains(err.Error(), `output schema has type [null array], MCP requires "object"`) {
		t.Errorf("list result: %v", err)
	}
	scalarInput := func(context.Context, string) (EventHistoryOutput, error) { return EventHistoryOutput{}, nil }
	if _, err := newTool("scalar_input", "", "", ScopeTools, scalarInput, nil); err == nil ||
		!strings.Contains(err.Error(), `input schema has type string, MCP requires "object"`) {
		t.Errorf("string input: %v", err)
	}
}
