package echostore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/duckdb/duckdb-go/v2"
)

// readPolicy admits a query only if everything it names is a read of the store: DuckDB's
// own parser turns the text into a tree (json_serialize_sql), and every relation, table
// function and function in that tree must be on an allowlist. A SELECT is not enough:
// DuckDB's table functions run inside a SELECT and some change the whole instance
// (enable_logging, enable_profiling, checkpoint, truncate_duckdb_logs), reveal its files
// and settings (duckdb_databases, duckdb_settings, pragma_database_list), or abort the
// process (enable_logging(storage := 'file') throws while the query's connection closes,
// and the exception ends the gateway). lock_configuration does not stop them.
type readPolicy struct {
	// relations are the store's own tables and views, lower-case.
	relations map[string]bool
	// catalogRelations are every table and view name the catalog has in any schema:
	// a CTE may not take one of those names (see checkCTEs).
	catalogRelations map[string]bool
	// functions are the scalar, aggregate and window functions a query may call.
	functions map[string]bool
}

// readTableFunctions are the table functions a query may call: they compute rows from
// their arguments or describe the store's own schema, and touch nothing else.
var readTableFunctions = map[string]bool{
	"range": true, "generate_series": true, "unnest": true,
	"json_each": true, "json_tree": true,
	"duckdb_tables": true, "duckdb_columns": true, "duckdb_views": true,
}

// readSchemaViews are the information_schema views a query may read, for schema
// discovery by agents that know the SQL standard's names.
var readSchemaViews = map[string]bool{"tables": true, "columns": true}

// revealingFunctions have no side effect in DuckDB's sense but read the server's
// environment, settings or files rather than the store.
var revealingFunctions = []string{
	"current_setting", "getenv", "get_block_size", "current_database", "current_catalog",
}

// loadReadPolicy builds the allowlists from the migrated store's catalog. Scalar and
// aggregate functions are admitted where DuckDB itself says they have no side effects
// (that excludes write_log, setseed, nextval, sleep_ms, error ...); macros only from the
// main schema, whose bodies are built-in expressions (the pg_catalog ones read the
// catalog and sleep).
func loadReadPolicy(ctx context.Context, db *sql.DB) (*readPolicy, error) {
	p := &readPolicy{relations: map[string]bool{}, catalogRelations: map[string]bool{}, functions: map[string]bool{}}
	fill := func(into map[string]bool, query string, args ...any) error {
		rows, err := db.QueryContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("read catalog for the SQL policy: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			into[strings.ToLower(name)] = true
		}
		return rows.Err()
	}
	if err := fill(p.relations, `
		SELECT table_name FROM duckdb_tables() WHERE NOT internal AND database_name = current_database() AND schema_name = 'main'
		UNION SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = current_database() AND schema_name = 'main'`); err != nil {
		return nil, err
	}
	if err := fill(p.catalogRelations, `
		SELECT table_name FROM duckdb_tables() UNION SELECT view_name FROM duckdb_views()`); err != nil {
		return nil, err
	}
	if err := fill(p.functions, `
		SELECT function_name FROM duckdb_functions()
		WHERE (function_type IN ('scalar', 'aggregate') AND NOT has_side_effects)
		   OR (function_type = 'macro' AND schema_name = 'main')
		EXCEPT SELECT function_name FROM duckdb_functions() WHERE has_side_effects`); err != nil {
		return nil, err
	}
	for _, name := range revealingFunctions {
		delete(p.functions, name)
	}
	return p, nil
}

// parsedQuery is json_serialize_sql's answer.
type parsedQuery struct {
	Error        bool              `json:"error"`
	ErrorType    string            `json:"error_type"`
	ErrorMessage string            `json:"error_message"`
	Statements   []json.RawMessage `json:"statements"`
}

// check parses query with the connection's own parser and walks the tree. A refusal
// wraps ErrNotReadOnly and names what was refused; text that does not parse wraps
// ErrQueryFailed with DuckDB's message.
func (p *readPolicy) check(ctx context.Context, conn *duckdb.Conn, query string) error {
	rows, err := conn.QueryContext(ctx, `SELECT json_serialize_sql(?::VARCHAR)::VARCHAR`, []driver.NamedValue{{Ordinal: 1, Value: query}})
	if err != nil {
		return classify(ctx, err)
	}
	dest := []driver.Value{nil}
	err = rows.Next(dest)
	rows.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return classify(ctx, err)
	}
	text, _ := dest[0].(string)
	var parsed parsedQuery
	if err := json.Unmarshal([]byte(text), &parsed); err != nil {
		return fmt.Errorf("%w: the parse tree could not be read: %v", ErrQueryFailed, err)
	}
	if parsed.Error {
		// json_serialize_sql serialises SELECT statements only; anything else it names
		// "not implemented".
		if parsed.ErrorType == "not implemented" {
			return fmt.Errorf("%w: the statement is not a SELECT", ErrNotReadOnly)
		}
		return fmt.Errorf("%w: %s", ErrQueryFailed, parsed.ErrorMessage)
	}
	if len(parsed.Statements) != 1 {
		return fmt.Errorf("%w: the text holds %d statements", ErrNotReadOnly, len(parsed.Statements))
	}
	var tree any
	dec := json.NewDecoder(strings.NewReader(string(parsed.Statements[0])))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		return fmt.Errorf("%w: the parse tree could not be read: %v", ErrQueryFailed, err)
	}
	return p.walk(tree, nil)
}

// walk visits every node of the tree. ctes holds the names of the common table
// expressions declared by the enclosing query nodes.
func (p *readPolicy) walk(node any, ctes []string) error {
	switch n := node.(type) {
	case []any:
		for _, child := range n {
			if err := p.walk(child, ctes); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		return p.walkObject(n, ctes)
	default:
		return nil
	}
}

func (p *readPolicy) walkObject(n map[string]any, ctes []string) error {
	if m, ok := n["cte_map"].(map[string]any); ok {
		declared, err := p.checkCTEs(m)
		if err != nil {
			return err
		}
		ctes = append(slices.Clip(ctes), declared...)
	}
	class, isExpression := n["class"].(string)
	typ, _ := n["type"].(string)
	_, hasAlias := n["alias"]
	_, hasSample := n["sample"]
	switch {
	case isExpression && (class == "FUNCTION" || class == "WINDOW"):
		if err := p.checkFunction(n); err != nil {
			return err
		}
	case !isExpression && hasAlias && hasSample:
		// A table reference (query nodes have a sample but no alias).
		if err := p.checkTableRef(n, typ, ctes); err != nil {
			return err
		}
		if typ == "TABLE_FUNCTION" {
			// The function itself was checked as a table function; its arguments are
			// ordinary expressions.
			fn, _ := n["function"].(map[string]any)
			return p.walk(fn["children"], ctes)
		}
	}
	for _, child := range n {
		if err := p.walk(child, ctes); err != nil {
			return err
		}
	}
	return nil
}

// checkCTEs refuses a common table expression that takes the name of a catalog table
// or view: DuckDB resolves a name that is out of the CTE's scope to the catalog, and
// the name check of checkTableRef would otherwise take the catalog's view for the CTE.
func (p *readPolicy) checkCTEs(cteMap map[string]any) ([]string, error) {
	entries, _ := cteMap["map"].([]any)
	var names []string
	for _, e := range entries {
		entry, _ := e.(map[string]any)
		name, _ := entry["key"].(string)
		name = strings.ToLower(name)
		if p.catalogRelations[name] && !p.relations[name] {
			return nil, fmt.Errorf("%w: the CTE name %q is the name of a system view; rename it", ErrNotReadOnly, name)
		}
		names = append(names, name)
	}
	return names, nil
}

func (p *readPolicy) checkFunction(n map[string]any) error {
	name, _ := n["function_name"].(string)
	name = strings.ToLower(name)
	schema, _ := n["schema"].(string)
	catalog, _ := n["catalog"].(string)
	if catalog != "" || (schema != "" && !strings.EqualFold(schema, "main")) {
		return fmt.Errorf("%w: function %s.%s: only unqualified functions are allowed", ErrNotReadOnly, schema, name)
	}
	if !p.functions[name] {
		return fmt.Errorf("%w: function %s is not allowed in read-only queries (it has side effects or reads the server's settings or files)",
			ErrNotReadOnly, name)
	}
	return nil
}

func (p *readPolicy) checkTableRef(n map[string]any, typ string, ctes []string) error {
	switch typ {
	case "BASE_TABLE":
		written, _ := n["table_name"].(string)
		schema, _ := n["schema_name"].(string)
		catalog, _ := n["catalog_name"].(string)
		name, schema, catalog := strings.ToLower(written), strings.ToLower(schema), strings.ToLower(catalog)
		switch {
		case catalog == "" && schema == "" && slices.Contains(ctes, name):
			return nil
		case catalog == "" && (schema == "" || schema == "main") && p.relations[name]:
			return nil
		case catalog == "" && schema == "information_schema" && readSchemaViews[name]:
			return nil
		}
		return fmt.Errorf("%w: %q is not a table of the Echo store (tables: %s)", ErrNotReadOnly, qualified(catalog, schema, written), p.relationList())
	case "TABLE_FUNCTION":
		fn, _ := n["function"].(map[string]any)
		name, _ := fn["function_name"].(string)
		name = strings.ToLower(name)
		schema, _ := fn["schema"].(string)
		catalog, _ := fn["catalog"].(string)
		if catalog == "" && schema == "" && readTableFunctions[name] {
			return nil
		}
		return fmt.Errorf("%w: table function %s is not allowed in read-only queries (allowed: %s)",
			ErrNotReadOnly, qualified(catalog, schema, name), strings.Join(slices.Sorted(maps.Keys(readTableFunctions)), ", "))
	case "SHOW_REF":
		// DESCRIBE and SUMMARIZE of a query describe that query, which is walked; the
		// forms that name no query list the catalog.
		if inner, _ := n["table_name"].(string); inner == "" && n["query"] != nil {
			return nil
		}
		return fmt.Errorf("%w: SHOW and DESCRIBE of the catalog are not allowed; query duckdb_tables() or information_schema.columns", ErrNotReadOnly)
	case "SUBQUERY", "JOIN", "EXPRESSION_LIST", "EMPTY", "PIVOT":
		return nil
	}
	return fmt.Errorf("%w: table reference of type %s is not allowed", ErrNotReadOnly, typ)
}

func (p *readPolicy) relationList() string {
	return strings.Join(slices.Sorted(maps.Keys(p.relations)), ", ")
}

func qualified(parts ...string) string {
	var out []string
	for _, s := range parts {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, ".")
}
