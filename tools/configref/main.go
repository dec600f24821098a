// Command configref writes docs/configuration.md: every setting of Fathom's own
// components, with its default (the factory's default config, marshalled as the
// collector would read it) and what it does (the doc comment on its field). Generated,
// so it cannot drift from the code: `make generate` runs it, and CI fails when the
// committed file differs.
package main

//go:generate go run . -out ../../docs/configuration.md

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"

	"github.com/fathom-gpu/fathom/exporter/echostoreexporter"
	"github.com/fathom-gpu/fathom/extension/echoextension"
	"github.com/fathom-gpu/fathom/extension/nodecertextension"
	"github.com/fathom-gpu/fathom/extension/thresholdsextension"
	"github.com/fathom-gpu/fathom/processor/causalchainprocessor"
	"github.com/fathom-gpu/fathom/processor/inputboundsprocessor"
	"github.com/fathom-gpu/fathom/processor/nodeidentityprocessor"
	"github.com/fathom-gpu/fathom/processor/stragglerprocessor"
	"github.com/fathom-gpu/fathom/receiver/gpuebpfreceiver"
)

// entry is one component: its kind, its factory and its package directory (from the
// repository root), whose doc comments describe its settings.
type entry struct {
	kind, dir, doc string
	factory        component.Factory
}

var components = []entry{
	{"receiver", "receiver/gpuebpfreceiver", "gpuebpf.md", gpuebpfreceiver.NewFactory()},
	{"processor", "processor/causalchainprocessor", "causalchain.md", causalchainprocessor.NewFactory()},
	{"processor", "processor/stragglerprocessor", "straggler.md", stragglerprocessor.NewFactory()},
	{"processor", "processor/inputboundsprocessor", "reliability.md", inputboundsprocessor.NewFactory()},
	{"processor", "processor/nodeidentityprocessor", "security.md", nodeidentityprocessor.NewFactory()},
	{"exporter", "exporter/echostoreexporter", "echo.md", echostoreexporter.NewFactory()},
	{"extension", "extension/echoextension", "echo.md", echoextension.NewFactory()},
	{"extension", "extension/thresholdsextension", "straggler.md", thresholdsextension.NewFactory()},
	{"extension", "extension/nodecertextension", "security.md", nodecertextension.NewFactory()},
}

func main() {
	out := flag.String("out", "", "file to write (default stdout)")
	flag.Parse()
	root, err := filepath.Abs("../..")
	if err != nil {
		log.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n" +
		"Every setting of Fathom's own components, with its default and what it does.\n" +
		"Generated from the code by `tools/configref` (`make generate`): the defaults\n" +
		"are each factory's default config, the descriptions the doc comments of its\n" +
		"fields. A nested setting is written `parent.child`; `[]` marks a list. Settings\n" +
		"of the collector's own components (the `otlp` receiver and exporters, `batch`,\n" +
		"`memory_limiter`, ...) are in the OpenTelemetry Collector's documentation. Example\n" +
		"pipelines are in `deploy/configs/`.\n")
	for _, e := range components {
		rows, err := describe(root, e)
		if err != nil {
			log.Fatalf("%s: %v", e.dir, err)
		}
		fmt.Fprintf(&b, "\n## `%s` (%s)\n\n[%s](%s), package `%s`.\n\n| setting | default | what it does |\n|---|---|---|\n",
			e.factory.Type(), e.kind, e.doc, e.doc, e.dir)
		for _, r := range rows {
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.key, r.def, r.doc)
		}
	}
	if *out == "" {
		os.Stdout.Write(b.Bytes())
		return
	}
	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

type row struct{ key, def, doc string }

// describe walks the component's Config struct by its mapstructure tags.
func describe(root string, e entry) ([]row, error) {
	types, typeDocs, err := structTypesAndDocs(filepath.Join(root, e.dir))
	if err != nil {
		return nil, err
	}
	conf := confmap.New()
	if err := conf.Marshal(e.factory.CreateDefaultConfig()); err != nil {
		return nil, err
	}
	defaults := map[string]any{}
	flatten("", conf.ToStringMap(), defaults)
	var rows []row
	var walk func(prefix string, st *ast.StructType)
	walk = func(prefix string, st *ast.StructType) {
		for _, f := range st.Fields.List {
			tag := mapstructureTag(f)
			if tag == "-" {
				continue
			}
			nested := types[typeName(f.Type)]
			if strings.Contains(tag, "squash") && nested != nil {
				walk(prefix, nested)
				continue
			}
			if tag == "" || strings.HasPrefix(tag, ",") {
				continue
			}
			key := prefix + tag
			if _, isList := f.Type.(*ast.ArrayType); isList {
				key += "[]"
			}
			doc := docOf(f)
			if doc == "" && nested != nil {
				doc = typeDocs[typeName(f.Type)]
			}
			rows = append(rows, row{key: key, def: defaultOf(key, defaults, nested != nil), doc: doc})
			if nested != nil {
				walk(key+".", nested)
			}
		}
	}
	cfg := types["Config"]
	if cfg == nil {
		return nil, fmt.Errorf("no Config struct")
	}
	walk("", cfg)
	return rows, nil
}

// structTypesAndDocs are the struct types declared in a package's non-test files, and
// their doc comments.
func structTypesAndDocs(dir string) (map[string]*ast.StructType, map[string]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, nil, err
	}
	types := map[string]*ast.StructType{}
	docs := map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, nil, err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				if st, ok := ts.Type.(*ast.StructType); ok {
					types[ts.Name.Name] = st
					doc := ts.Doc
					if doc == nil {
						doc = gd.Doc
					}
					if doc != nil {
						docs[ts.Name.Name] = oneLine(doc.Text())
					}
				}
			}
		}
	}
	return types, docs, nil
}

func oneLine(text string) string {
	return strings.ReplaceAll(strings.Join(strings.Fields(text), " "), "|", "\\|")
}

func mapstructureTag(f *ast.Field) string {
	if f.Tag == nil {
		return ""
	}
	return reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("mapstructure")
}

// typeName is the local type a field refers to (through pointers and slices).
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return typeName(t.X)
	case *ast.ArrayType:
		return typeName(t.Elt)
	}
	return ""
}

func docOf(f *ast.Field) string {
	text := ""
	if f.Doc != nil {
		text = f.Doc.Text()
	} else if f.Comment != nil {
		text = f.Comment.Text()
	}
	return oneLine(text)
}

func flatten(prefix string, v any, out map[string]any) {
	switch m := v.(type) {
	case map[string]any:
		out[strings.TrimSuffix(prefix, ".")] = m
		for k, x := range m {
			flatten(prefix+k+".", x, out)
		}
	default:
		out[strings.TrimSuffix(prefix, ".")] = v
	}
}

// defaultOf prints a setting's default; a struct's defaults are its children's rows.
func defaultOf(key string, defaults map[string]any, isStruct bool) string {
	v, ok := defaults[strings.TrimSuffix(key, "[]")]
	if !ok || v == nil {
		return ""
	}
	if d, ok := v.(time.Duration); ok {
		return "`" + d.String() + "`"
	}
	if m, isMap := v.(map[string]any); isMap {
		if isStruct || len(m) == 0 {
			return ""
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return "`" + strings.Join(keys, ", ") + "`"
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(raw)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return "`" + strings.ReplaceAll(s, "|", "\\|") + "`"
}
