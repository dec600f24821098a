package nodeidentityprocessor

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fathom-gpu/fathom/internal/nodeidentity"
	"github.com/fathom-gpu/fathom/internal/semconv"
	"github.com/fathom-gpu/fathom/processor/nodeidentityprocessor/internal/metadata"
)

type checker struct {
	shared    map[string]bool
	logger    *zap.Logger
	telemetry *metadata.TelemetryBuilder
}

func newChecker(cfg *Config, set processor.Settings) (*checker, error) {
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &checker{shared: cfg.shared(), logger: set.Logger, telemetry: tb}, nil
}

func (c *checker) shutdown(context.Context) error {
	c.telemetry.Shutdown()
	return nil
}

// node is the node the request's certificate binds it to; false where nothing binds it
// (no certificate, or one every node holds).
func (c *checker) node(ctx context.Context) (string, bool) {
	node, ok := nodeidentity.FromContext(ctx)
	if !ok || c.shared[node] {
		return "", false
	}
	return node, true
}

// check looks at every resource before it changes any: a request is refused whole or
// passed whole. Resources without a host are stamped with the certificate's.
func (c *checker) check(ctx context.Context, node string, resources []pcommon.Resource, items int) error {
	for _, res := range resources {
		host, ok := res.Attributes().Get(semconv.HostName)
		if ok && host.AsString() != node {
			c.telemetry.FathomNodeidentityRefused.Add(ctx, int64(items), metric.WithAttributes(attribute.String("reason", "other_host")))
			c.logger.Warn("refused a request for another node's host",
				zap.String("certificate", node), zap.String("host.name", host.AsString()), zap.Int("items", items))
			return consumererror.NewPermanent(status.Error(codes.PermissionDenied,
				fmt.Sprintf("nodeidentity: the client certificate names node %q, and the request carries data for host.name %q: a node writes only its own", node, host.AsString())))
		}
	}
	for _, res := range resources {
		if _, ok := res.Attributes().Get(semconv.HostName); !ok {
			res.Attributes().PutStr(semconv.HostName, node)
		}
	}
	return nil
}

func (c *checker) processMetrics(ctx context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	node, ok := c.node(ctx)
	if !ok {
		return md, nil
	}
	rms := md.ResourceMetrics()
	resources := make([]pcommon.Resource, rms.Len())
	for i := range rms.Len() {
		resources[i] = rms.At(i).Resource()
	}
	return md, c.check(ctx, node, resources, md.DataPointCount())
}

func (c *checker) processLogs(ctx context.Context, ld plog.Logs) (plog.Logs, error) {
	node, ok := c.node(ctx)
	if !ok {
		return ld, nil
	}
	rls := ld.ResourceLogs()
	resources := make([]pcommon.Resource, rls.Len())
	for i := range rls.Len() {
		resources[i] = rls.At(i).Resource()
	}
	return ld, c.check(ctx, node, resources, ld.LogRecordCount())
}
