package gpuebpfreceiver

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/fathom-gpu/fathom/internal/probes"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// recordSizes is what each kind of kernel record must at least hold to be decoded.
var recordSizes = map[probes.EventKind]int{
	probes.KindCUDACall:      int(unsafe.Sizeof(probes.CUDACall{})),
	probes.KindCUDAThread:    int(unsafe.Sizeof(probes.EventHeader{})),
	probes.KindSched:         int(unsafe.Sizeof(probes.SchedSwitchIn{})),
	probes.KindFork:          int(unsafe.Sizeof(probes.ProcessEvent{})),
	probes.KindExec:          int(unsafe.Sizeof(probes.ProcessEvent{})),
	probes.KindExit:          int(unsafe.Sizeof(probes.ProcessEvent{})),
	probes.KindBlockIO:       int(unsafe.Sizeof(probes.BlockIO{})),
	probes.KindTCPRetransmit: int(unsafe.Sizeof(probes.TCPRetransmit{})),
	probes.KindIdentity:      int(unsafe.Sizeof(probes.ProcessIdentity{})),
	probes.KindNCCLCall:      int(unsafe.Sizeof(probes.NCCLCall{})),
	probes.KindRDMAAsync:     int(unsafe.Sizeof(probes.RDMAAsyncEvent{})),
	probes.KindLibraryMapped: int(unsafe.Sizeof(probes.LibraryMapped{})),
}

const kindOffset = int(unsafe.Offsetof(probes.EventHeader{}.Kind))

func recordOf[T any](ev *T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(ev)), unsafe.Sizeof(*ev))...)
}

// decodeSeeds: one plausible record of every kind, the same at the edges of its fields
// (API and kind numbers past their enums, lengths past their arrays, a NUL-less device
// name), each also cut short by a byte and grown by 64, and records of no known kind.
func decodeSeeds() [][]byte {
	hdr := func(kind probes.EventKind) probes.EventHeader {
		return probes.EventHeader{TsNs: 1_000_000, Pid: 4242, Tid: 4243, CgroupId: 77, Kind: uint8(kind)}
	}
	var records [][]byte
	call := probes.CUDACall{Hdr: hdr(probes.KindCUDACall), Api: apiID("cudaMemcpyAsync"), DurationNs: 5_000_000, Bytes: 1 << 20, MemcpyKind: uint8(probes.MemcpyHostToDevice), Ret: 700}
	records = append(records, recordOf(&call))
	call.Api, call.MemcpyKind, call.DurationNs = math.MaxUint32, 255, math.MaxUint64
	records = append(records, recordOf(&call))
	th := hdr(probes.KindCUDAThread)
	records = append(records, recordOf(&th))
	sched := probes.SchedSwitchIn{OffCpuNs: 3_000_000, RunqNs: 200_000, Preempted: 1}
	sched.Hdr.Pid, sched.Hdr.Tid, sched.Hdr.Kind = 4242, 4243, uint8(probes.KindSched)
	records = append(records, recordOf(&sched))
	for _, kind := range []probes.EventKind{probes.KindFork, probes.KindExec, probes.KindExit} {
		proc := probes.ProcessEvent{ParentPid: 4242, ExitCode: 0x8b00}
		proc.Hdr.Pid, proc.Hdr.Tid, proc.Hdr.Kind = 4242, 4242, uint8(kind)
		for i := range proc.Comm {
			proc.Comm[i] = 'p' // no NUL: a comm of the full 16 bytes
		}
		records = append(records, recordOf(&proc))
	}
	blk := probes.BlockIO{DurationNs: 9_000_000, Bytes: 4096, Dev: 8 << 20, Write: 255}
	blk.Hdr.Pid, blk.Hdr.Kind = 4242, uint8(probes.KindBlockIO)
	records = append(records, recordOf(&blk))
	tcp := probes.TCPRetransmit{Sport: 443, Dport: 50000, Family: 10, State: 1}
	tcp.Hdr.Kind = uint8(probes.KindTCPRetransmit)
	tcp.Saddr[15], tcp.Daddr[15] = 1, 2
	records = append(records, recordOf(&tcp))
	tcp.Family = 99 // neither AF_INET nor AF_INET6
	records = append(records, recordOf(&tcp))
	id := probes.ProcessIdentity{Hdr: hdr(probes.KindIdentity)}
	env := "RANK=3\x00WORLD_SIZE=8\x00LOCAL_RANK=-1\x00=\x00NOEQUALS\x00RANK=99999999999999999999"
	for i := range env {
		id.Env[i] = int8(env[i])
	}
	id.EnvLen = uint32(len(env))
	records = append(records, recordOf(&id))
	id.EnvLen = math.MaxUint32 // longer than the buffer it describes
	records = append(records, recordOf(&id))
	nccl := probes.NCCLCall{Api: probes.NCCLAllReduce, CommHash: 0xdeadbeefcafef00d, Rank: 3, Nranks: 8, Count: 1 << 20, Bytes: 4 << 20, Datatype: 7, Redop: 0, Seq: 40, HasSeq: 1, Peer: -1, Stream: 0x1000, DurationNs: 2_000_000}
	nccl.Hdr.Pid, nccl.Hdr.Tid, nccl.Hdr.Kind = 4242, 4243, uint8(probes.KindNCCLCall)
	records = append(records, recordOf(&nccl))
	nccl.Api, nccl.Datatype, nccl.Redop, nccl.Rank, nccl.Nranks, nccl.Ret = probes.NCCLSend, 255, 0xfe, -1, math.MinInt32, 5
	records = append(records, recordOf(&nccl))
	nccl.Api = uint32(probes.NCCLAPICount)
	records = append(records, recordOf(&nccl))
	rdma := probes.RDMAAsyncEvent{EventType: 10, Port: 1}
	rdma.Hdr.Kind = uint8(probes.KindRDMAAsync)
	for i := range rdma.Device {
		rdma.Device[i] = 'm' // no NUL
	}
	records = append(records, recordOf(&rdma))
	rdma.EventType, rdma.Port = math.MaxUint32, -1
	records = append(records, recordOf(&rdma))
	lm := probes.LibraryMapped{Dev: math.MaxUint32, Library: 255}
	lm.Hdr.Kind = uint8(probes.KindLibraryMapped)
	records = append(records, recordOf(&lm))

	var seeds [][]byte
	for _, r := range records {
		seeds = append(seeds, r, r[:len(r)-1], append(append([]byte(nil), r...), make([]byte, 64)...))
	}
	unknown := make([]byte, 64)
	unknown[kindOffset] = 200
	seeds = append(seeds, nil, []byte{1}, make([]byte, kindOffset), make([]byte, kindOffset+1), unknown)
	return seeds
}

// FuzzDecodeRecord feeds any bytes as one ring-buffer record through the decoder into
// the receiver's own aggregator and log sink (policy "all", so every record that
// decodes is also logged), then builds an export. A record must decode, and be counted
// as one event of its kind, exactly when it is long enough for a known kind; anything
// else is an error the reader counts as a "decode" drop. Nothing may panic.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add(s)
	}
	procRoot, cgroupRoot := f.TempDir(), f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg := createDefaultConfig()
		cfg.Logs.Policy = LogsAll
		// Empty directories: the process lookups run and fail fast, so Identity falls
		// back to the kernel's copy of the environment, as for a process already gone.
		cfg.Discovery.ProcRoot, cfg.Discovery.CgroupRoot = procRoot, cgroupRoot
		clock := &wallClock{}
		clock.refresh()
		a := newAggregator(cfg, clock, nil, false)
		a.logs = newLogSink(cfg, clock, &a.drops, hostIdentity("fuzz", false))

		// The ring buffer hands out 8-byte aligned records; the decoder casts in place.
		aligned := make([]uint64, (len(raw)+7)/8)
		record := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(aligned))), len(aligned)*8)[:len(raw)]
		copy(record, raw)

		err := probes.Decode(record, a)

		var kind probes.EventKind
		size, known := 0, false
		if len(raw) > kindOffset {
			kind = probes.EventKind(raw[kindOffset])
			size, known = recordSizes[kind]
		}
		wantDecoded := known && len(raw) >= size
		switch {
		case wantDecoded && err != nil:
			t.Fatalf("kind %d, %d bytes (needs %d): %v", kind, len(raw), size, err)
		case !wantDecoded && err == nil:
			t.Fatalf("kind %d, %d bytes (known %v, needs %d): decoded", kind, len(raw), known, size)
		}
		var events uint64
		for i := range a.events {
			events += a.events[i].Load()
		}
		// Library mappings go to discovery, which this aggregator is not: decoded, not counted.
		if want := uint64(0); wantDecoded && kind != probes.KindLibraryMapped {
			want = 1
			if a.events[kind].Load() != 1 || events != want {
				t.Fatalf("kind %d: %d events counted, %d of its kind", kind, events, a.events[kind].Load())
			}
		} else if events != 0 {
			t.Fatalf("kind %d not decoded, yet %d events counted", kind, events)
		}

		ld, n := a.logs.take()
		if n != ld.LogRecordCount() || n > 1 {
			t.Fatalf("%d log records (%d counted) from one kernel record", ld.LogRecordCount(), n)
		}
		if kind == probes.KindNCCLCall && n == 1 {
			checkNCCLLog(t, ld, record)
		}
		md := a.emit(time.Now(), 0, hostTotals{}, &hostTotals{}, hostIdentity("fuzz", false))
		if md.ResourceMetrics().Len() == 0 {
			t.Fatal("no host resource in the export")
		}
	})
}

// checkNCCLLog: the communicator id is the hash in 16 hex digits, the same string every
// rank writes, and the data type and reduction are named or left out, never made up.
func checkNCCLLog(t *testing.T, ld plog.Logs, record []byte) {
	ev := (*probes.NCCLCall)(unsafe.Pointer(&record[0]))
	attrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes()
	id, ok := attrs.Get(semconv.NCCLCommID)
	switch {
	case ev.CommHash == 0 && ok:
		t.Fatalf("communicator id %q for a call without one", id.Str())
	case ev.CommHash != 0:
		if !ok || len(id.Str()) != 16 {
			t.Fatalf("communicator id %v for hash %#x", id, ev.CommHash)
		}
		if back, err := strconv.ParseUint(id.Str(), 16, 64); err != nil || back != ev.CommHash {
			t.Fatalf("communicator id %q does not read back as %#x", id.Str(), ev.CommHash)
		}
	}
	dt, ok := attrs.Get(semconv.NCCLDataType)
	if want := probes.NCCLDataType(ev.Datatype); ok != (want != "") || (ok && dt.Str() != want) {
		t.Fatalf("data type %d logged as %v (present %v)", ev.Datatype, dt, ok)
	}
	if op, ok := attrs.Get(semconv.NCCLReduceOp); ok && strings.TrimSpace(op.Str()) == "" {
		t.Fatalf("empty reduce op for %d", ev.Redop)
	}
}
