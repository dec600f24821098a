package procinfo

import (
	"strconv"
	"strings"
)

// HCAs is a rank's NCCL_IB_HCA: the RDMA devices and ports NCCL may use for it. As NCCL
// reads it, entries are "device[:port]" separated by commas; a leading "=" makes the
// names exact (otherwise each is a prefix: "mlx5" is every mlx5_N), and a leading "^"
// turns the list into the devices not to use.
type HCAs struct {
	Set     bool // NCCL_IB_HCA was in the environment and named something
	Exclude bool
	Exact   bool
	Entries []HCAEntry
}

// HCAEntry is one device of the list; Port 0 is every port.
type HCAEntry struct {
	Device string
	Port   int
}

// maxHCAEntries bounds what one environment variable may make a process hold.
const maxHCAEntries = 64

// ParseHCAs reads an NCCL_IB_HCA value.
func ParseHCAs(v string) HCAs {
	v = strings.TrimSpace(v)
	var h HCAs
	if rest, ok := strings.CutPrefix(v, "^"); ok {
		h.Exclude, v = true, rest
	}
	if rest, ok := strings.CutPrefix(v, "="); ok {
		h.Exact, v = true, rest
	}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" || len(h.Entries) == maxHCAEntries {
			continue
		}
		device, port, _ := strings.Cut(item, ":")
		e := HCAEntry{Device: device}
		if n, err := strconv.Atoi(port); err == nil && n > 0 {
			e.Port = n
		}
		h.Entries = append(h.Entries, e)
	}
	h.Set = len(h.Entries) > 0
	return h
}

// Uses says whether NCCL may use port of device for this rank. Without NCCL_IB_HCA it
// is false: NCCL then picks among every device, and the rank is bound to none of them.
func (h HCAs) Uses(device string, port int) bool {
	if !h.Set {
		return false
	}
	listed := false
	for _, e := range h.Entries {
		name := device == e.Device || (!h.Exact && strings.HasPrefix(device, e.Device))
		if name && (e.Port == 0 || e.Port == port) {
			listed = true
			break
		}
	}
	return listed != h.Exclude
}
