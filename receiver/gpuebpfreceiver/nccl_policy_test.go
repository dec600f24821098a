package gpuebpfreceiver

import (
	"testing"

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

// allReduces feeds n all-reduces of each of ranks rank processes, sequences 0..n-1.
func allReduces(agg *aggregator, ranks, n int) {
	for seq := 0; seq < n; seq++ {
		for rank := 0; rank < ranks; rank++ {
			var ev probes.NCCLCall
			ev.Hdr.Pid = uint32(syntheticPIDBase + rank)
			ev.Hdr.Tid = ev.Hdr.Pid
			ev.Hdr.TsNs = uint64(seq) * 1_000_000
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
	seqsByRank := map[int64][]int64{}
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
			seqsByRank[rank.Int()] = append(seqsByRank[rank.Int()], seq.Int())
		}
	}
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
