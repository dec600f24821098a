package stragglerprocessor

import (
	"context"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// output is what one evaluation sends downstream: gauges and the node's clock offsets
// into the metrics pipeline, the state changes into the logs pipeline. A zero field is
// nothing to send.
type output struct {
	gauges, extra pmetric.Metrics
	records       plog.Logs
}

// downstreamQueue is how many evaluations' outputs wait for the pipelines behind the
// processor: 32 s of evaluations every 250 ms. The store's exporter answers only once
// a write is committed, and a write waits seconds behind a checkpoint or an agent's
// long query: the evaluations that fell due meanwhile would wait with it, and when it
// returned the samples of several intervals were judged against one line (the matrix's
// false flags at full size, docs/straggler.md). Evaluation never waits on its
// downstream; what does not fit is dropped and counted (downstream_full).
const downstreamQueue = 128

// downstream hands evaluations' outputs to the next consumers, in order, from a
// goroutine of its own.
type downstream struct {
	queue chan output
	done  chan struct{}
}

// startDownstream starts sending what is offered with send until ctx ends; what is
// still queued then is dropped through dropped.
func startDownstream(ctx context.Context, send func(context.Context, output), dropped func(reason string, n int64)) *downstream {
	d := &downstream{queue: make(chan output, downstreamQueue), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			select {
			case <-ctx.Done():
				if n := len(d.queue); n > 0 {
					dropped("downstream_shutdown", int64(n))
				}
				return
			case o := <-d.queue:
				send(ctx, o)
			}
		}
	}()
	return d
}

// offer queues o without waiting; false when the queue is full.
func (d *downstream) offer(o output) bool {
	select {
	case d.queue <- o:
		return true
	default:
		return false
	}
}

// wait returns once the sender has ended (its context done).
func (d *downstream) wait() { <-d.done }
