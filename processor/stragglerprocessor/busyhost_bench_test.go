//go:build linux && bench

package stragglerprocessor_test

import (
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/series"
)

// TestBusyHostSignalsReport prints, for the detection matrix's base shape (six ranks
// spinning on two cores, 2 ms of host work a step, rank 3's 20% longer from 25 s on),
// each rank's median and MAD per 250 ms sample of every rank signal before and after
// the slowdown, from the gateway's store, and its CUDA threads' on-CPU time read from
// /proc beside it: which signal sets the slow rank apart on a busy host
// (docs/straggler.md, CPU time). Run: go test -tags duckdb_arrow,bench -run
// TestBusyHostSignalsReport -v ./processor/stragglerprocessor (root).
func TestBusyHostSignalsReport(t *testing.T) {
	row := baseMatrixRow()
	o := row.opts
	o.slowBy = o.hostCompute * 20 / 100
	j := startJob(t, o)
	type cpuPt struct {
		at time.Time
		ns []float64
	}
	var cpu []cpuPt
	read := func() []float64 {
		var out []float64
		for _, r := range j.run.Ranks {
			var sum float64
			tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", r.Pid))
			for _, task := range tasks {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", r.Pid, task.Name()))
				var on float64
				fmt.Sscan(string(b), &on)
				sum += on
			}
			out = append(out, sum)
		}
		return out
	}
	stop := every(t, 250*time.Millisecond, func(int) error { cpu = append(cpu, cpuPt{time.Now(), read()}); return nil })
	time.Sleep(25 * time.Second)
	on := j.slowDown()
	time.Sleep(40 * time.Second)
	stop()
	for r := range j.run.Ranks {
		var pre, post []float64
		for i := 1; i < len(cpu); i++ {
			rate := (cpu[i].ns[r] - cpu[i-1].ns[r]) / 1e9 / cpu[i].at.Sub(cpu[i-1].at).Seconds()
			if cpu[i].at.Before(on.Add(-time.Second)) && cpu[i].at.After(on.Add(-16*time.Second)) {
				pre = append(pre, rate)
			} else if cpu[i].at.After(on.Add(2 * time.Second)) {
				post = append(post, rate)
			}
		}
		mp, mq := series.Median(pre), series.Median(post)
		t.Logf("on-CPU rank %d: pre median %.4f (MAD %.4f, n %d)  post median %.4f (MAD %.4f, n %d)", r, mp, series.MAD(pre, mp), len(pre), mq, series.MAD(post, mq), len(post))
	}
	for _, sig := range []string{"fathom.rank.device_wait.time", "fathom.rank.host_lead.time", "fathom.rank.run_queue.time", "fathom.rank.launches"} {
		rows := j.sqlRows(fmt.Sprintf(`SELECT rank, epoch_ms(ts), value FROM events WHERE name = '%s' AND rank IS NOT NULL ORDER BY rank, ts`, sig))
		type pt struct{ at, v float64 }
		by := map[int][]pt{}
		for _, r := range rows {
			by[int(r[0].(float64))] = append(by[int(r[0].(float64))], pt{r[1].(float64), r[2].(float64)})
		}
		var ranks []int
		for r := range by {
			ranks = append(ranks, r)
		}
		sort.Ints(ranks)
		onMs := float64(on.UnixMilli())
		for _, r := range ranks {
			ps := by[r]
			var pre, post []float64
			for i := 1; i < len(ps); i++ {
				dt := (ps[i].at - ps[i-1].at) / 1000
				if dt <= 0 || ps[i].v < ps[i-1].v {
					continue
				}
				rate := (ps[i].v - ps[i-1].v) / dt
				if ps[i].at < onMs-1000 && ps[i].at > onMs-16000 {
					pre = append(pre, rate)
				} else if ps[i].at > onMs+2000 {
					post = append(post, rate)
				}
			}
			mp, mq := series.Median(pre), series.Median(post)
			t.Logf("%s rank %d: pre median %.4f (MAD %.4f, n %d)  post median %.4f (MAD %.4f, n %d)", sig, r, mp, series.MAD(pre, mp), len(pre), mq, series.MAD(post, mq), len(post))
		}
	}
	for _, r := range j.timedRecords() {
		t.Logf("record %+v", r)
	}
}
