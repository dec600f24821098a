package procinfo

import (
	"strconv"
	"strings"
)

// VisibleDevices is CUDA_VISIBLE_DEVICES: which GPUs a process's CUDA device ordinals
// name. Unset, ordinal N is GPU N.
type VisibleDevices struct {
	Set bool
	// List holds the entries in order: GPU indices ("3"), UUIDs or their prefixes
	// ("GPU-5c1d2a33"), or MIG instances ("MIG-...").
	List []string
}

// ParseVisibleDevices reads the variable's value; set says whether it was in the
// environment at all (set and empty hides every GPU).
func ParseVisibleDevices(v string, set bool) VisibleDevices {
	d := VisibleDevices{Set: set}
	if !set {
		return d
	}
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			d.List = append(d.List, e)
		}
	}
	return d
}

// GPU says which GPU the process's device ordinal names: its physical index, or a UUID
// (prefix) to match. ok is false for an ordinal past the list, a MIG instance, or an
// entry CUDA would not read.
func (d VisibleDevices) GPU(ordinal int) (index int, uuid string, ok bool) {
	if ordinal < 0 {
		return 0, "", false
	}
	if !d.Set {
		return ordinal, "", true
	}
	if ordinal >= len(d.List) {
		return 0, "", false
	}
	e := d.List[ordinal]
	if n, err := strconv.Atoi(e); err == nil && n >= 0 {
		return n, "", true
	}
	if strings.HasPrefix(e, "GPU-") {
		return 0, e, true
	}
	return 0, "", false
}
