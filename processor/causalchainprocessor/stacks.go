package causalchainprocessor

import (
	"path/filepath"
	"slices"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/semconv"
)

// maxStackCalls bounds the recorded calls kept per process for its dominant stack: a
// node's log policy caps its records at about 1,000 a second, and a window of them is
// plenty to say where most of the time went.
const maxStackCalls = 4096

// stackCall is one recorded CUDA call of a process that carried a Python stack.
type stackCall struct {
	at      time.Time
	id      string
	tid     int64 // the thread that made it, -1 if unknown
	seconds float64
}

// stackInfo is what a chain says of a stack.
type stackInfo struct {
	frames, function, file string
	line                   int64
}

// stackTally keeps a process's recent stacked calls, to name the stack most of its
// recorded call time came from.
type stackTally struct {
	calls []stackCall
	info  map[string]stackInfo
	heard time.Time // wall clock of its last record, for forgetting it
}

func (t *stackTally) add(c stackCall, info stackInfo) {
	if len(t.calls) >= maxStackCalls {
		// Oldest out: a window's newest calls say where the time goes now.
		t.calls = append(t.calls[:0], t.calls[len(t.calls)/2:]...)
		t.prune()
	}
	t.calls = append(t.calls, c)
	if t.info == nil {
		t.info = map[string]stackInfo{}
	}
	// Most records of a stack carry its id and innermost frame only (the receiver sends
	// the frames whole once a minute): keep the frames of the one that had them.
	if prev, ok := t.info[c.id]; ok && info.frames == "" {
		info.frames = prev.frames
	}
	t.info[c.id] = info
}

// keepWindow drops the calls more than window older than the newest, and the stacks
// no call names any more. (The newest call's time, not the wall clock: records carry
// the traced process's clock.)
func (t *stackTally) keepWindow(window time.Duration) {
	var newest time.Time
	for _, c := range t.calls {
		if c.at.After(newest) {
			newest = c.at
		}
	}
	t.forgetBefore(newest.Add(-window))
}

// forgetBefore drops the calls before from, and the stacks no call names any more.
func (t *stackTally) forgetBefore(from time.Time) {
	keep := t.calls[:0]
	for _, c := range t.calls {
		if !c.at.Before(from) {
			keep = append(keep, c)
		}
	}
	t.calls = keep
	t.prune()
}

func (t *stackTally) prune() {
	used := make(map[string]bool, len(t.info))
	for _, c := range t.calls {
		used[c.id] = true
	}
	for id := range t.info {
		if !used[id] {
			delete(t.info, id)
		}
	}
}

// dominant is the stack most of the recorded call time since from came from, and its
// share of that time: of the calls of thread tid when it made any (a chain about one
// thread), else of all the process's; ok false without stacked calls.
func (t *stackTally) dominant(from time.Time, tid int64) (id string, info stackInfo, share float64, ok bool) {
	ofThread := tid >= 0 && slices.ContainsFunc(t.calls, func(c stackCall) bool { return c.tid == tid && !c.at.Before(from) })
	byID := map[string]float64{}
	total := 0.0
	for _, c := range t.calls {
		if c.at.Before(from) || ofThread && c.tid != tid {
			continue
		}
		byID[c.id] += c.seconds
		total += c.seconds
	}
	best := -1.0
	for sid, s := range byID {
		if s > best || s == best && sid < id {
			id, best = sid, s
		}
	}
	if best < 0 || total <= 0 {
		return "", stackInfo{}, 0, false
	}
	return id, t.info[id], best / total, true
}

// where is "function() at file:line", the stack's innermost frame.
func (s stackInfo) where() string {
	return s.function + "() at " + filepath.Base(s.file) + ":" + itoa(s.line)
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// ingestStacks takes the CUDA call records that carry a Python stack.
func (c *chains) ingestStacks(ld plog.Logs) {
	for _, rl := range ld.ResourceLogs().All() {
		pid, ok := rl.Resource().Attributes().Get(semconv.ProcessPID)
		if !ok {
			continue
		}
		host, _ := rl.Resource().Attributes().Get(semconv.HostName)
		id := processID{host.AsString(), pid.Int()}
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				if lr.EventName() != semconv.EventCUDACall {
					continue
				}
				a := lr.Attributes()
				sid, ok := a.Get(semconv.StackID)
				if !ok {
					continue
				}
				seconds, _ := a.Get(semconv.DurationSeconds)
				tid := int64(-1)
				if v, ok := a.Get(semconv.ThreadID); ok {
					tid = v.Int()
				}
				frames, _ := a.Get(semconv.PythonStack)
				fn, _ := a.Get(semconv.CodeFunction)
				file, _ := a.Get(semconv.CodeFilepath)
				line, _ := a.Get(semconv.CodeLineno)
				t := c.stacks[id]
				if t == nil {
					if len(c.stacks) >= c.cfg.Limits.MaxProcesses {
						continue
					}
					t = &stackTally{}
					c.stacks[id] = t
				}
				t.heard = c.now()
				t.add(stackCall{at: lr.Timestamp().AsTime(), id: sid.Str(), tid: tid, seconds: seconds.Double()},
					stackInfo{frames: frames.Str(), function: fn.Str(), file: file.Str(), line: line.Int()})
			}
		}
	}
}
