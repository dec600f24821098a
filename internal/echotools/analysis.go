package echotools

import (
	"context"

	"github.com/fathom-gpu/fathom/internal/echostore"
)

// AnalysisInput is one read-only SQL statement.
type AnalysisInput struct {
	SQL string `json:"sql" jsonschema:"one read-only SELECT over the events table (see the echo://schema resource); results are capped in rows, bytes and time"`
}

func runAnalysisTool(env *Env) (*Tool, error) {
	return newTool("run_analysis", "Run read-only SQL",
		"Runs one read-only SELECT on the Echo store (DuckDB SQL) and returns columns and rows. The engine enforces read-only; rows, bytes, time and concurrency are capped.",
		ScopeSQL,
		// A value, not the pointer RunSQL returns: the output schema must be an object,
		// never null.
		func(ctx context.Context, in AnalysisInput) (echostore.QueryResult, error) {
			res, err := RunSQL(ctx, env, in.SQL)
			if err != nil {
				return echostore.QueryResult{}, err
			}
			return *res, nil
		}, nil)
}

// RunSQL is run_analysis and POST /api/v1/sql: one engine-guarded query, if a slot is
// free.
func RunSQL(ctx context.Context, env *Env, query string) (*echostore.QueryResult, error) {
	if query == "" {
		return nil, invalid("sql is empty")
	}
	select {
	case env.SQLSlots <- struct{}{}:
		defer func() { <-env.SQLSlots }()
	default:
		return nil, ErrBusy
	}
	return env.Store.QueryReadOnly(ctx, query, env.SQLLimits)
}
