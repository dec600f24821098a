package node

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/fathom-gpu/fathom/extension/thresholdsextension/internal/metadata"
	"github.com/fathom-gpu/fathom/internal/pushback"
	"github.com/fathom-gpu/fathom/internal/testsupport/thresholdstest"
)

// The shared sample lines.
var line, launchLine, otherCohortLine = thresholdstest.Line, thresholdstest.LaunchLine, thresholdstest.OtherCohortLine

// newSubscriber is a node side with telemetry that goes nowhere, not started.
func newSubscriber(t *testing.T, s Settings) *Subscriber {
	t.Helper()
	set := componenttest.NewNopTelemetrySettings()
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		t.Fatal(err)
	}
	return NewSubscriber(s, set, tb)
}

// A malformed value changes nothing the node holds; past max_held, new cohorts are
// refused (counted) while the held ones are renewed.
func TestTheNodeKeepsWhatItHasOnBadAnswers(t *testing.T) {
	node := newSubscriber(t, Settings{TTL: 2 * time.Minute, MaxHeld: 1})
	good, _ := pushback.Encode([]pushback.Threshold{line}, 1024)
	_ = node.take(context.Background(), good, true)
	_ = node.take(context.Background(), "v1.garbage!", true)
	other := line
	other.Cohort = "comm-2"
	both, _ := pushback.Encode([]pushback.Threshold{line, other}, 1024)
	_ = node.take(context.Background(), both, true)
	if _, ok := node.Threshold(line.Key(), time.Now()); !ok {
		t.Error("the held threshold was lost")
	}
	if _, ok := node.Threshold(other.Key(), time.Now()); ok {
		t.Error("a cohort past max_held was taken")
	}
}
