package probes

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// percpuDistance returns the distance from per-CPU variable from to per-CPU variable to,
// the same on every CPU: both lie in the kernel's per-CPU section, whose copy for each
// CPU keeps the layout vmlinux BTF records (the .data..percpu datasec's offsets).
func percpuDistance(kernel *btf.Spec, from, to string) (int64, error) {
	var section *btf.Datasec
	if err := kernel.TypeByName(".data..percpu", &section); err != nil {
		return 0, fmt.Errorf("the per-CPU section in the kernel's BTF: %w", err)
	}
	offsets := map[string]int64{}
	for _, v := range section.Vars {
		if name := v.Type.TypeName(); name == from || name == to {
			offsets[name] = int64(v.Offset)
		}
	}
	f, okFrom := offsets[from]
	t, okTo := offsets[to]
	if !okFrom || !okTo {
		return 0, errors.New("per-CPU variables " + from + " and " + to + " not both in the kernel's BTF")
	}
	return t - f, nil
}

// setPreemptCountFromRQ tells the host programs where this CPU's preempt count lies
// from its run queue (preempt_count_from_rq in bpf/host.bpf.c). Without it they still
// name every waker, but take a wakeup from interrupt context for the interrupted task's.
func setPreemptCountFromRQ(spec *ebpf.CollectionSpec) error {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("read the kernel's BTF: %w", err)
	}
	distance, err := percpuDistance(kernel, "runqueues", "__preempt_count")
	if err != nil {
		return nil // an older or other kernel: no interrupt told apart
	}
	if err := spec.Variables["preempt_count_from_rq"].Set(distance); err != nil {
		return fmt.Errorf("configure preempt_count_from_rq: %w", err)
	}
	return nil
}
