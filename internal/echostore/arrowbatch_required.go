//go:build !duckdb_arrow

package echostore

import "database/sql/driver"

// The store writes through DuckDB's Arrow interface (arrowbatch.go), which duckdb-go
// compiles only under the duckdb_arrow build tag. Without the tag this package does not
// build, and the one compile error names the fix: the Makefile sets the tag in GOFLAGS
// and builder-config.yaml sets it for ocb; by hand, `go build -tags duckdb_arrow`.
type rowBatch = build_with_tag_duckdb_arrow

func newRowBatch(driver.Conn) (*rowBatch, error) { return nil, nil }
