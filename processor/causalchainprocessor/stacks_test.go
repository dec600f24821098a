package causalchainprocessor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// stackedCalls are the CUDA call records with Python stacks a process sends in one
// interval ending at end: n calls from each stack, each taking its seconds.
func stackedCalls(pid int64, end time.Time, stacks ...stackedCall) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr(semconv.HostName, "node-a")
	rl.Resource().Attributes().PutInt(semconv.ProcessPID, pid)
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for _, s := range stacks {
		for i := range s.n {
			lr := lrs.AppendEmpty()
			lr.SetTimestamp(pcommon.NewTimestampFromTime(end.Add(-time.Duration(i+1) * time.Millisecond)))
			lr.SetEventName(semconv.EventCUDACall)
			a := lr.Attributes()
			a.PutStr(semconv.CUDAAPIName, "cudaStreamSynchronize")
			a.PutInt(semconv.ThreadID, s.tid)
			a.PutDouble(semconv.DurationSeconds, s.seconds)
			a.PutStr(semconv.StackID, s.id)
			a.PutStr(semconv.PythonStack, s.frames)
			a.PutStr(semconv.CodeFunction, s.function)
			a.PutStr(semconv.CodeFilepath, "/job/train.py")
			a.PutInt(semconv.CodeLineno, s.line)
		}
	}
	return ld
}

type stackedCall struct {
	id, function, frames string
	line                 int64
	n                    int
	seconds              float64
	tid                  int64
}

// A Python process's lock_contention chain names the stack most of its thread's
// recorded CUDA call time came from: 8 syncs a second from forward() at 20 ms each
// against 2 from the loop at 10 ms, 89% of the time; the 100 ms syncs of another thread
// (a data-loading thread's) are not the chain's thread's. A process whose records carry
// no stack gets a chain without one.
func TestAChainNamesTheStackItsCallTimeCameFrom(t *testing.T) {
	forward := stackedCall{"00000000000000a1", "Net.forward", "Net.forward (/job/train.py:33) < main (/job/train.py:54)", 33, 8, 0.020, dispatcher}
	loop := stackedCall{"00000000000000a2", "main", "main (/job/train.py:59)", 59, 2, 0.010, dispatcher}
	other := stackedCall{"00000000000000a3", "prefetch", "prefetch (/job/data.py:12)", 12, 5, 0.100, dispatcher + 1}
	for _, stacked := range []bool{true, false} {
		cfg := testConfig()
		l := newLoop(t, cfg)
		s := newSim(4121, 3, time.Now().Add(-41*time.Second).Truncate(time.Second))
		for i := range 40 {
			s.healthy(dispatcher)
			if i >= 10 {
				s.blocked(dispatcher, "tokenizer", true, "lock", 1750, 400*time.Microsecond, 4)
			}
			if stacked {
				if err := l.logs.ConsumeLogs(context.Background(), stackedCalls(4121, s.t.Add(time.Second), forward, loop, other)); err != nil {
					t.Fatal(err)
				}
			}
			l.feed(s.export(time.Second))
		}
		var last plog.LogRecord
		found := false
		for _, ld := range l.records.AllLogs() {
			forEachRecord(ld, func(_ pcommon.Resource, lr plog.LogRecord) {
				if v, _ := lr.Attributes().Get(semconv.ChainRootCause); lr.EventName() == semconv.EventCausalChain && v.Str() == CauseLockContention {
					last, found = lr, true
				}
			})
		}
		if !found {
			t.Fatalf("stacked %v: no lock_contention chain", stacked)
		}
		a := last.Attributes()
		str := func(k string) string { v, _ := a.Get(k); return v.AsString() }
		if !stacked {
			if _, ok := a.Get(semconv.ChainStack); ok || strings.Contains(last.Body().Str(), " from ") {
				t.Errorf("a chain of a process without stacks names one: %s %v", last.Body().Str(), a.AsRaw())
			}
			continue
		}
		share, _ := a.Get(semconv.ChainStackShare)
		if str(semconv.ChainStackID) != forward.id || str(semconv.ChainStack) != forward.frames || str(semconv.CodeFunction) != "Net.forward" ||
			str(semconv.CodeFilepath) != "/job/train.py" || str(semconv.CodeLineno) != "33" || share.Double() != 0.8889 {
			t.Errorf("chain's stack: %v", a.AsRaw())
		}
		if body := last.Body().Str(); !strings.Contains(body, ", from Net.forward() at train.py:33 (89% of its recorded call time): ") {
			t.Errorf("body %q does not say where the calls came from", body)
		}
		t.Log(last.Body().Str())
	}
}
