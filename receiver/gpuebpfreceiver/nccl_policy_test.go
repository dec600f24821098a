package gpuebpfreceiver

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// newTestAggregator is an aggregator with a log sink, its processes made up when
// synthetic.
func newTestAggregator(cfg *Config, synthetic bool) *aggregator {
	clock := &wallClock{}
	clock.refresh()
	agg := newAggregator(cfg, clock, nil, synthetic)
	agg.logs = newLogSink(cfg, clock, &agg.drops, hostIdentity("", synthetic))
	return agg
}

// allReduces feeds n all-reduces of each of ranks rank processes, sequences 0..n-1,
// 1 ms apart.
func allReduces(agg *aggregator, ranks, n int) { allReducesEvery(agg, ranks, n, 1_000_000) }

// allReducesEvery feeds them gapNS apart.
func allReducesEvery(agg *aggregator, ranks, n int, gapNS uint64) {
	for seq := 0; seq < n; seq++ {
		for rank := 0; rank < ranks; rank++ {
			var ev probes.NCCLCall
			ev.Hdr.Pid = uint32(syntheticPIDBase + rank)
			ev.Hdr.Tid = ev.Hdr.Pid
			ev.Hdr.TsNs = uint64(seq) * gapNS
			ev.Api = probes.NCCLAllReduce
			ev.CommHash, ev.Rank, ev.Nranks = 0xfeed, int32(rank), int32(ranks)
			ev.Seq, ev.HasSeq = uint64(seq), 1
			ev.Peer = -1
			ev.DurationNs = 1_000_000
			agg.NCCLCall(&ev)
		}
	}
}

// Under the notable policy every rank keeps the same sequences, so each kept collective
// can be matched across all of its ranks at the gateway.
func TestNotableNCCLRecordsAreTheSameInstancesOnEveryRank(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Logs.NCCL.SampleEvery = 4
	agg := newTestAggregator(cfg, true)
	allReduces(agg, 3, 40)
	ld, n := agg.logs.take()
	if n != 3*10 {
		t.Fatalf("%d records, want 30 (every 4th of 40, on 3 ranks)", n)
	}
	seqsByRank := keptSeqs(t, ld)
	for rank, seqs := range seqsByRank {
		for i, s := range seqs {
			if s != int64(4*i) {
				t.Fatalf("rank %d kept sequences %v, want 0, 4, 8 ...", rank, seqs)
			}
		}
	}
	if drops := agg.drops.snapshot(); drops["nccl_log_rate"] != 0 {
		t.Errorf("drops %v", drops)
	}
}

// keptSeqs are the nccl.seq of the records in ld, by rank; each must be a collective
// of the communicator allReduces calls on.
func keptSeqs(t *testing.T, ld plog.Logs) map[int64][]int64 {
	t.Helper()
	out := map[int64][]int64{}
	for i := 0; i < ld.ResourceLogs().Len(); i++ {
		lrs := ld.ResourceLogs().At(i).ScopeLogs().At(0).LogRecords()
		for j := 0; j < lrs.Len(); j++ {
			a := lrs.At(j).Attributes()
			rank, _ := a.Get(semconv.NCCLRank)
			seq, _ := a.Get(semconv.NCCLSeq)
			id, _ := a.Get(semconv.NCCLCommID)
			if id.Str() != "000000000000feed" || lrs.At(j).EventName() != semconv.EventNCCLCollective {
				t.Fatalf("record %v", a.AsRaw())
			}
			out[rank.Int()] = append(out[rank.Int()], seq.Int())
		}
	}
	return out
}

// A communicator of long steps (one all-reduce every 640 ms) has every collective
// kept on every rank once its first whole window of the wall clock is counted, where
// one in 16 kept one every ten seconds; a fast one (1,000 a second) keeps one in 16.
func TestASlowCommunicatorKeepsMoreOfItsCollectives(t *testing.T) {
	cfg := createDefaultConfig() // sample_every 16, min_per_second 8
	agg := newTestAggregator(cfg, true)
	allReducesEvery(agg, 3, 50, 640_000_000) // 32 s
	ld, _ := agg.logs.take()
	byRank := keptSeqs(t, ld)
	for rank := int64(0); rank < 3; rank++ {
		seqs := byRank[rank]
		// Kept from the first seq past the first two windows (4 s: 7 collectives) on.
		var from int
		for i, s := range seqs {
			if s > 7 {
				from = i
				break
			}
		}
		tail := seqs[from:]
		if len(tail) != int(50-tail[0]) || tail[len(tail)-1] != 49 {
			t.Errorf("rank %d kept %v, want every collective after the first windows", rank, seqs)
		}
	}
	cfg.Logs.NCCL.MaxPerSecond = 1 << 20 // the budget is the machine's time, not the calls'
	agg = newTestAggregator(cfg, true)
	allReducesEvery(agg, 3, 8000, 1_000_000) // 8 s at 1,000 a second
	ld, _ = agg.logs.take()
	for rank, seqs := range keptSeqs(t, ld) {
		for i, s := range seqs {
			if s != int64(16*i) {
				t.Fatalf("rank %d kept %v..., want one in 16", rank, seqs[:min(len(seqs), 10)])
			}
		}
	}
}

// Past the NCCL record budget, records are dropped and counted; metrics still count all.
func TestNCCLRecordBudgetCountsDrops(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Logs.NCCL = NCCLLogsConfig{SampleEvery: 1, MaxPerSecond: 50}
	agg := newTestAggregator(cfg, true)
	allReduces(agg, 2, 100)
	_, n := agg.logs.take()
	if dropped := agg.drops.snapshot()["nccl_log_rate"]; n < 50 || n+int(dropped) != 200 {
		t.Fatalf("%d records kept, %d dropped, want 50 kept (the burst) and all 200 accounted for", n, dropped)
	}
	for rank := 0; rank < 2; rank++ {
		p := agg.processes[uint32(syntheticPIDBase+rank)]
		s := p.nccl[ncclKey{comm: 0xfeed, rank: int32(rank), nranks: 2, api: probes.NCCLAllReduce}]
		if s == nil || s.calls != 100 || s.duration.Count != 100 {
			t.Fatalf("rank %d series %+v", rank, s)
		}
	}
}
