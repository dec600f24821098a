// Command chartrender renders a chart as `helm install` or `helm upgrade` would, against
// a cluster that holds only the objects given: the chart's lookup calls see them. It
// prints every rendered file, NOTES.txt included, as one JSON object (path to text).
// `helm template` can do neither: its lookups see no cluster, and it drops NOTES.txt.
// The deploy tests use it to render an upgrade over what an install made
// (deploy/deploy_test.go).
//
//	chartrender -chart DIR -name RELEASE -namespace NS [-existing FILE] [-set k=v]...
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/fake"
)

type sets []string

func (s *sets) String() string     { return fmt.Sprint(*s) }
func (s *sets) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	chartDir := flag.String("chart", "", "the chart's directory")
	name := flag.String("name", "", "the release's name")
	namespace := flag.String("namespace", "default", "the release's namespace")
	existing := flag.String("existing", "", "a YAML file of the objects the cluster holds (an upgrade); none: an install")
	var values sets
	flag.Var(&values, "set", "a value, as helm --set takes it (repeatable)")
	flag.Parse()
	if err := run(*chartDir, *name, *namespace, *existing, values, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chartrender:", err)
		os.Exit(1)
	}
}

func run(chartDir, name, namespace, existing string, values []string, out io.Writer) error {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	vals := map[string]any{}
	for _, v := range values {
		if err := strvals.ParseInto(v, vals); err != nil {
			return fmt.Errorf("-set %s: %w", v, err)
		}
	}
	var objects []runtime.Object
	if existing != "" {
		if objects, err = readObjects(existing); err != nil {
			return err
		}
	}
	options := chartutil.ReleaseOptions{Name: name, Namespace: namespace, Revision: 1, IsInstall: existing == "", IsUpgrade: existing != ""}
	if options.IsUpgrade {
		options.Revision = 2
	}
	top, err := chartutil.ToRenderValues(chrt, vals, options, chartutil.DefaultCapabilities)
	if err != nil {
		return err
	}
	rendered, err := engine.RenderWithClientProvider(chrt, top, secretsOnly{objects})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(rendered)
}

func readObjects(path string) ([]runtime.Object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objects []runtime.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return objects, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if obj != nil {
			objects = append(objects, &unstructured.Unstructured{Object: obj})
		}
	}
}

// secretsOnly answers the chart's lookups from the objects given: Secrets are all the
// chart looks up, and another kind is a chart change this tool should learn of.
type secretsOnly struct{ objects []runtime.Object }

func (c secretsOnly) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	if apiVersion != "v1" || kind != "Secret" {
		return nil, false, fmt.Errorf("the chart looks up %s %s; chartrender knows only v1 Secret", apiVersion, kind)
	}
	client := fake.NewSimpleDynamicClient(runtime.NewScheme(), c.objects...)
	return client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}), true, nil
}
