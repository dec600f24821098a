//go:build linux

package stragglerprocessor_test

import (
	"bufio"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What the matrix reads around a false flag, besides the scores: a flag decided after a
// pause (of the store's path, of a node's samples) is read by what the collectors
// counted and said in it. Each collector's telemetry (its Prometheus endpoint) is read
// at every accounting: a false flag logs the counters of losses that moved since the
// last one (a full sending queue, a refused batch, the evaluation's dropped output),
// and every warning or error the gateway and the nodes logged from 20 s before it.

// lossCounters are a collector's counters of what it lost or failed to pass on, by
// series (the name with its labels); empty when its telemetry does not answer.
func lossCounters(port string) map[string]float64 {
	out := map[string]float64{}
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://localhost:" + port + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 {
			continue
		}
		series := line[:cut]
		name, _, _ := strings.Cut(series, "{")
		if !strings.Contains(name, "dropped") && !strings.Contains(name, "failed") && !strings.Contains(name, "refused") {
			continue
		}
		if v, err := strconv.ParseFloat(line[cut+1:], 64); err == nil {
			out[series] = v
		}
	}
	return out
}

// collectorWatch is each collector's name, telemetry port and output, and its loss
// counters at the last accounting.
type collectorWatch struct {
	names, ports []string
	output       []func() string
	last         []map[string]float64
}

func (j *job) watchCollectors() *collectorWatch {
	w := &collectorWatch{names: []string{"gateway"}, ports: []string{j.gw.Listen["FATHOM_TELEMETRY_PORT"]}, output: []func() string{j.gateway.Output}}
	for i, n := range j.nodes {
		w.names = append(w.names, "node-"+strconv.Itoa(i))
		w.ports = append(w.ports, j.nodeTelemetry[i])
		w.output = append(w.output, n.Output)
	}
	w.last = make([]map[string]float64, len(w.ports))
	w.account()
	return w
}

// account reads every collector's counters and returns those that moved since the
// last accounting, as "collector: series +n" lines.
func (w *collectorWatch) account() []string {
	var moved []string
	for i, port := range w.ports {
		now := lossCounters(port)
		for _, series := range slices.Sorted(maps.Keys(now)) {
			if d := now[series] - w.last[i][series]; d != 0 && w.last[i] != nil {
				moved = append(moved, w.names[i]+": "+series+" +"+strconv.FormatFloat(d, 'f', -1, 64))
			}
		}
		w.last[i] = now
	}
	return moved
}

// complaints are the warnings and errors each collector logged from from to until, as
// the collector's console lines ("2026-11-28T19:18:36.123Z\twarn\t...").
func (w *collectorWatch) complaints(from, until time.Time) []string {
	var out []string
	for i, output := range w.output {
		for line := range strings.Lines(output()) {
			fields := strings.SplitN(line, "\t", 3)
			if len(fields) < 3 || (fields[1] != "warn" && fields[1] != "error") {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, fields[0])
			if err != nil || at.Before(from) || at.After(until) {
				continue
			}
			out = append(out, w.names[i]+": "+strings.TrimSpace(line))
		}
	}
	return out
}

// counted says how many loss counters each collector's telemetry gave at the last
// accounting: none from one whose telemetry did not answer.
func (w *collectorWatch) counted() string {
	var parts []string
	for i, name := range w.names {
		parts = append(parts, name+" "+strconv.Itoa(len(w.last[i])))
	}
	return strings.Join(parts, ", ")
}
