package gpuebpfreceiver

import (
	"sort"
	"strconv"
	"strings"

	"github.com/fathom-gpu/fathom/internal/rdmasysfs"
	"github.com/fathom-gpu/fathom/internal/semconv"
)

// rankFabric is what a rank's RDMA ports counted since the rank was first seen: the
// ports it sends over, summed, so that a rank whose link errors or waits for credits
// carries it on its own series.
type rankFabric struct {
	// base is each counter of each port at the rank's first reading.
	base map[string]uint64
	// exported are the totals at the last export (delta temporality).
	exportedWait, exportedErrors uint64
}

// maxRankPorts bounds the ports one rank is bound to, maxRankDevices the NICs it is
// seen creating queue pairs on.
const (
	maxRankPorts   = 64
	maxRankDevices = 16
)

// emitRankFabric writes the rank's fathom.rank.rdma.xmit_wait and .errors from the
// node's last port reading, with a detail naming the ports. The ports are those of the
// NICs the rank created queue pairs on (the ones its connections use), within its
// NCCL_IB_HCA if it has one; before any queue pair, those its NCCL_IB_HCA allows. A
// rank with neither is bound to no port: NCCL would pick among them all.
func emitRankFabric(set *metricSet, p *processSeries, ports []rdmasysfs.Port) {
	byQP := len(p.qpDevices) > 0
	if (!byQP && !p.info.IBHCAs.Set) || len(ports) == 0 {
		return
	}
	uses := func(port rdmasysfs.Port) bool {
		if byQP && !p.qpDevices[port.Device] {
			return false
		}
		return !p.info.IBHCAs.Set || p.info.IBHCAs.Uses(port.Device, port.Port)
	}
	if p.fabric == nil {
		p.fabric = &rankFabric{base: map[string]uint64{}}
	}
	f := p.fabric
	var wait, errs uint64
	var names []string
	for _, port := range ports {
		if !uses(port) || len(names) == maxRankPorts {
			continue
		}
		names = append(names, port.Device+" port "+strconv.Itoa(port.Port)+" ("+port.Transport+")")
		for name, v := range port.Values {
			c, _ := rdmasysfs.CounterByName(name)
			if c.Kind != rdmasysfs.KindError && c.Kind != rdmasysfs.KindXmitWait {
				continue
			}
			key := port.Device + "/" + strconv.Itoa(port.Port) + "/" + name
			base, ok := f.base[key]
			if !ok || v < base { // first seen, or the poller started its totals again
				f.base[key], base = v, v
			}
			if c.Kind == rdmasysfs.KindXmitWait {
				wait += v - base
			} else {
				errs += v - base
			}
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	detail := "NCCL_IB_HCA: " + strings.Join(names, ", ")
	if byQP {
		detail = "queue pairs on: " + strings.Join(names, ", ")
	}
	outWait, outErrs := wait, errs
	if set.delta {
		outWait, outErrs = wait-min(wait, f.exportedWait), errs-min(errs, f.exportedErrors)
	}
	f.exportedWait, f.exportedErrors = wait, errs
	set.sum(semconv.MetricRankRDMAXmitWait, "{tick}", "Ticks the rank's RDMA ports waited for credits to send, since the rank was first seen", outWait).PutStr(semconv.SignalDetail, detail)
	set.sum(semconv.MetricRankRDMAErrors, "{error}", "Error counts of the rank's RDMA ports, since the rank was first seen", outErrs).PutStr(semconv.SignalDetail, detail)
}
