//go:build linux

package probes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
)

// Run reads events until ctx is done. The programs submit without waking the reader
// (BPF_RB_NO_WAKEUP keeps a wakeup out of every traced call), so the reader drains the
// ring on a short timer; decodeErr counts records it could not decode.
func (p *Probes) Run(ctx context.Context, h Handler, decodeErr func(error)) error {
	var rec ringbuf.Record
	p.reader.SetDeadline(time.Now().Add(p.pollTimeout))
	for {
		err := p.reader.ReadInto(&rec)
		switch {
		case err == nil:
			if derr := Decode(rec.RawSample, h); derr != nil && decodeErr != nil {
				decodeErr(derr)
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			if ctx.Err() != nil {
				return nil
			}
			p.reader.SetDeadline(time.Now().Add(p.pollTimeout))
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		default:
			return err
		}
	}
}

// Drops sums the kernel's per-CPU drop counters by reason.
func (p *Probes) Drops() (map[string]uint64, error) {
	names := map[uint32]string{
		uint32(cudaDropReasonDROP_RINGBUF_FULL):    "ringbuf_full",
		uint32(cudaDropReasonDROP_ENTRY_MISSING):   "entry_missing",
		uint32(cudaDropReasonDROP_TRACED_SET_FULL): "traced_set_full",
		uint32(cudaDropReasonDROP_CALL_STATS_FULL): "call_stats_full",
	}
	out := make(map[string]uint64, len(names)+1)
	// Programs are new with each collector: their misses need no adopted base.
	out["program_recursion"] = p.recursionMisses()
	for reason, name := range names {
		var perCPU []uint64
		if err := p.cuda.Drops.Lookup(reason, &perCPU); err != nil {
			return nil, err
		}
		for _, n := range perCPU {
			out[name] += n
		}
		if base := p.adoptedBase; base != nil {
			base.mu.Lock()
			out[name] -= base.drops[name]
			base.mu.Unlock()
		}
	}
	return out, nil
}

// recursionMisses sums the runs the kernel skipped because the same program was
// already running on that CPU: a tracepoint that fires in an interrupt while its
// program runs in the interrupted context (a block completion in hard IRQ over one in
// softirq, a page allocation in an interrupt). What the skipped run would have counted
// is lost, so it is a drop.
func (p *Probes) recursionMisses() uint64 {
	var n uint64
	for _, progs := range []any{p.cuda.cudaPrograms, p.host.hostPrograms, p.nccl.ncclPrograms, p.rdma.rdmaPrograms, p.libmap.libmapPrograms} {
		v := reflect.ValueOf(progs)
		for i := 0; i < v.NumField(); i++ {
			prog, ok := v.Field(i).Interface().(*ebpf.Program)
			if !ok || prog == nil {
				continue
			}
			if st, err := prog.Stats(); err == nil {
				n += st.RecursionMisses
			}
		}
	}
	return n
}

// HostAggregates are the in-kernel aggregates of the host family, as totals since load.
type HostAggregates struct {
	// Log2 histograms: bucket i counts values in [2^i, 2^(i+1)) ns.
	RunQueueOther, BlockRead, BlockWrite [64]uint64
	PagesOther                           uint64
	PagesByPID                           map[uint32]uint64
	RetransmitsIPv4, RetransmitsIPv6     uint64
	BlockBytesRead, BlockBytesWrite      uint64
}

// ReadHostAggregates sums the per-CPU aggregates.
func (p *Probes) ReadHostAggregates() (HostAggregates, error) {
	var agg HostAggregates
	hists := []*[64]uint64{&agg.RunQueueOther, &agg.BlockRead, &agg.BlockWrite}
	for h, dst := range hists {
		for b := 0; b < 64; b++ {
			var perCPU []uint64
			if err := p.host.HostHists.Lookup(uint32(h*64+b), &perCPU); err != nil {
				return agg, err
			}
			for _, n := range perCPU {
				dst[b] += n
			}
		}
	}
	counters := []*uint64{&agg.PagesOther, &agg.RetransmitsIPv4, &agg.RetransmitsIPv6, &agg.BlockBytesRead, &agg.BlockBytesWrite}
	for c, dst := range counters {
		var perCPU []uint64
		if err := p.host.HostCounters.Lookup(uint32(c), &perCPU); err != nil {
			return agg, err
		}
		for _, n := range perCPU {
			*dst += n
		}
	}
	agg.PagesByPID = map[uint32]uint64{}
	var pid uint32
	var pages uint64
	it := p.host.PageAllocs.Iterate()
	for it.Next(&pid, &pages) {
		agg.PagesByPID[pid] = pages
	}
	if base := p.adoptedBase; base != nil {
		base.mu.Lock()
		agg.subtract(&base.host)
		base.mu.Unlock()
	}
	return agg, it.Err()
}

// ReadCallStats reads the call statistics of every process that has a slot, reusing
// dst. The programs update them while this reads: a total can be one call ahead in
// one field of another, never behind an earlier reading.
// ForgetPageAllocs drops process pid's page-allocation total, once its last export
// carried it: the kernel keeps totals by pid, and a process that reuses the pid must
// start from zero.
func (p *Probes) ForgetPageAllocs(pid uint32) error {
	if base := p.adoptedBase; base != nil {
		base.mu.Lock()
		delete(base.host.PagesByPID, pid)
		base.mu.Unlock()
	}
	if err := p.host.PageAllocs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

func (p *Probes) ReadCallStats(dst []ProcessCallStats) ([]ProcessCallStats, error) {
	var owners [ProcSlots]uint64
	if _, err := p.procSlots.ReadAt(asBytes(owners[:]), 0); err != nil {
		return dst, fmt.Errorf("read process slots: %w", err)
	}
	dst = dst[:0]
	for slot, pid := range owners {
		if pid == 0 {
			continue
		}
		dst = append(dst, ProcessCallStats{PID: uint32(pid), slot: uint32(slot)})
		s := &dst[len(dst)-1]
		if _, err := p.callStats.ReadAt(asBytes(s.ByAPI[:]), slotOffset(s.slot)); err != nil {
			return dst, fmt.Errorf("read call statistics: %w", err)
		}
		if base := p.adoptedBase; base != nil {
			base.mu.Lock()
			if adopted := base.calls[s.slot]; adopted != nil {
				for api := range s.ByAPI {
					s.ByAPI[api].subtract(&adopted[api])
				}
			}
			base.mu.Unlock()
		}
	}
	return dst, nil
}

// ReleaseCallStats gives an exited process's slot back, once its last counts have been
// read: its statistics are zeroed first, so the next owner starts from nothing.
func (p *Probes) ReleaseCallStats(s *ProcessCallStats) error {
	if base := p.adoptedBase; base != nil {
		base.mu.Lock()
		delete(base.calls, s.slot)
		base.mu.Unlock()
	}
	if err := p.cuda.SelectedDevices.Delete(s.PID); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("forget selected device: %w", err)
	}
	var zero [APICount]CallStats
	if _, err := p.callStats.WriteAt(asBytes(zero[:]), slotOffset(s.slot)); err != nil {
		return fmt.Errorf("zero call statistics: %w", err)
	}
	if err := p.cuda.SlotWaits.Put(s.slot, uint64(0)); err != nil {
		return fmt.Errorf("zero the slot's last device wait: %w", err)
	}
	// Only a free slot is ever claimed by the kernel, so this owner cannot change under us.
	var free uint64
	_, err := p.procSlots.WriteAt(asBytes([]uint64{free}), int64(s.slot)*8)
	return err
}

// SelectedDevices returns, per process, the device ordinal it last selected with a
// successful cudaSetDevice (the CUDA device as the process numbers them, before its
// CUDA_VISIBLE_DEVICES maps it to a GPU).
func (p *Probes) SelectedDevices() (map[uint32]int32, error) {
	out := map[uint32]int32{}
	var pid uint32
	var device int32
	it := p.cuda.SelectedDevices.Iterate()
	for it.Next(&pid, &device) {
		out[pid] = device
	}
	return out, it.Err()
}

// slotOffset is where a process slot's statistics start in the mapped call_stats_table
// (indexed by slot * API_COUNT + api).
func slotOffset(slot uint32) int64 {
	return int64(slot) * int64(APICount) * int64(unsafe.Sizeof(CallStats{}))
}

func asBytes[T any](s []T) []byte {
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

// SetNotableThreshold makes calls of api lasting at least ns become records (0: every
// call; NeverNotable: failed calls only). Until set, every call is recorded.
func (p *Probes) SetNotableThreshold(api uint32, ns uint64) error {
	return p.cuda.NotableNs.Update(api, ns, ebpf.UpdateAny)
}
