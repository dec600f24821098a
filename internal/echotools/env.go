package echotools

import (
	"time"

	"github.com/fathom-gpu/fathom/internal/echostore"
)

// DefaultSQLLimits and DefaultSQLConcurrency bound run_analysis where nobody set
// anything: they are the echo extension's `sql:` defaults, and what the tools over a
// store copy (`fathom mcp --db`, `fathom explain --db`) run under, so a query answers
// the same offline as on the gateway.
var DefaultSQLLimits = echostore.QueryLimits{MaxRows: 10_000, MaxBytes: 8 << 20, Timeout: 10 * time.Second}

// DefaultSQLConcurrency is how many run_analysis queries run at once by default.
const DefaultSQLConcurrency = 2

// NewEnv is the tools' view of an open store: the bounds on user SQL, and the price
// list get_cost reads from ratesFile (empty: GPU-hours only).
func NewEnv(st *echostore.Store, sqlLimits echostore.QueryLimits, sqlConcurrency int, ratesFile string) (*Env, error) {
	rates, err := LoadRates(ratesFile)
	if err != nil {
		return nil, err
	}
	return &Env{
		Store:     st,
		SQLLimits: sqlLimits,
		SQLSlots:  make(chan struct{}, sqlConcurrency),
		Rates:     rates,
	}, nil
}
