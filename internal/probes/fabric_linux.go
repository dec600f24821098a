//go:build linux

package probes

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// loadFabric loads the NCCL and verbs families onto the maps the CUDA family created.
func (p *Probes) loadFabric(opts Options, shared map[string]*ebpf.Map) error {
	ncclSpec, err := loadNccl()
	if err != nil {
		return err
	}
	if err := ncclSpec.Variables["trace_all"].Set(opts.TraceAllCUDA); err != nil {
		return fmt.Errorf("configure trace_all: %w", err)
	}
	if err := ncclSpec.Variables["native_stacks"].Set(!opts.NoNativeStacks); err != nil {
		return fmt.Errorf("configure native_stacks: %w", err)
	}
	p.setUprobeAttachType(ncclSpec)
	ncclOpts, err := p.state.pin("nccl", ncclSpec, shared)
	if err != nil {
		return err
	}
	if err := ncclSpec.LoadAndAssign(&p.nccl, ncclOpts); err != nil {
		return explainLoadError("nccl probes", err)
	}
	rdmaSpec, err := loadRdma()
	if err != nil {
		p.nccl.Close()
		return err
	}
	p.setUprobeAttachType(rdmaSpec)
	rdmaOpts, err := p.state.pin("rdma", rdmaSpec, shared)
	if err != nil {
		p.nccl.Close()
		return err
	}
	if err := rdmaSpec.LoadAndAssign(&p.rdma, rdmaOpts); err != nil {
		p.nccl.Close()
		return explainLoadError("rdma probes", err)
	}
	return nil
}

// present keeps the replacements for maps the spec declares: MapReplacements refuses
// names a spec does not have.
func present(spec *ebpf.CollectionSpec, shared map[string]*ebpf.Map) map[string]*ebpf.Map {
	out := map[string]*ebpf.Map{}
	for name, m := range shared {
		if _, ok := spec.Maps[name]; ok {
			out[name] = m
		}
	}
	return out
}

// attachPoint is one probed function: its entry and return programs and the cookie
// that tells the return program which function returned.
type attachPoint struct {
	symbol     string
	cookie     uint64
	entry, ret *ebpf.Program
}

// attachPoints lists what to attach in a library of kind lib.
func (p *Probes) attachPoints(lib Library) []attachPoint {
	var out []attachPoint
	add := func(symbol string, cookie uint32, entry, ret *ebpf.Program) {
		if p.baseline {
			entry, ret = p.cuda.EmptyEntry, p.cuda.EmptyReturn
		}
		out = append(out, attachPoint{symbol: symbol, cookie: uint64(cookie), entry: entry, ret: ret})
	}
	switch lib {
	case LibNCCL:
		for _, a := range NCCLAPIs {
			add(a.Symbol, a.ID, a.entry(&p.nccl.ncclPrograms), p.nccl.LeaveNccl)
		}
	case LibIBVerbs:
		add(ibvAsyncEventSymbol, 0, p.rdma.EnterIbvGetAsyncEvent, p.rdma.LeaveIbvGetAsyncEvent)
		add(ibvCreateQPSymbol, 0, p.rdma.EnterIbvCreateQp, p.rdma.LeaveIbvCreateQp)
	default:
		for _, a := range APIs {
			if a.Library == lib {
				add(a.Symbol, a.ID, a.entry(&p.cuda.cudaPrograms), p.cuda.LeaveCall)
			}
		}
	}
	return out
}

func programRun(prog *ebpf.Program) (ProgramRun, error) {
	st, err := prog.Stats()
	if err != nil {
		return ProgramRun{}, err
	}
	return ProgramRun{Runtime: st.Runtime, Runs: st.RunCount}, nil
}
