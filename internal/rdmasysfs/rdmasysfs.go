// Package rdmasysfs reads the port counters RDMA drivers publish under
// /sys/class/infiniband/DEVICE/ports/PORT/counters, for InfiniBand and RoCE ports alike.
// A host without an HCA has no such directory, and polling it finds nothing.
package rdmasysfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Kind says what a counter counts, which decides the metric it feeds.
type Kind int

const (
	KindError    Kind = iota // something went wrong on the link
	KindData                 // payload, in units of 4 bytes as the IB spec counts it
	KindPackets              // packets
	KindXmitWait             // ticks the port waited for credits to send
)

// Counter is one counter file of a port.
type Counter struct {
	Name      string
	Kind      Kind
	Direction string // "receive" or "transmit" for data and packets, "" otherwise
}

// Counters are the files read from every port's counters directory; those a driver
// does not publish are skipped.
var Counters = []Counter{
	{"port_rcv_errors", KindError, ""},
	{"symbol_error", KindError, ""},
	{"link_downed", KindError, ""},
	{"link_error_recovery", KindError, ""},
	{"port_xmit_discards", KindError, ""},
	{"local_link_integrity_errors", KindError, ""},
	{"excessive_buffer_overrun_errors", KindError, ""},
	{"port_rcv_remote_physical_errors", KindError, ""},
	{"port_rcv_switch_relay_errors", KindError, ""},
	{"port_rcv_constraint_errors", KindError, ""},
	{"port_xmit_constraint_errors", KindError, ""},
	{"VL15_dropped", KindError, ""},
	{"port_xmit_wait", KindXmitWait, ""},
	{"port_rcv_data", KindData, "receive"},
	{"port_xmit_data", KindData, "transmit"},
	{"port_rcv_packets", KindPackets, "receive"},
	{"port_xmit_packets", KindPackets, "transmit"},
}

// Port is the counters of one port as totals since they were first read.
type Port struct {
	Device    string
	Port      int
	Transport string            // "infiniband" or "roce"
	Values    map[string]uint64 // counter name -> monotonic total
}

type counterKey struct {
	device  string
	port    int
	counter string
}

// Poller keeps what it read last, so a counter that goes backwards (a driver reload,
// a reset by perfquery -R) continues from where it was instead of going backwards.
type Poller struct {
	root  string
	last  map[counterKey]uint64
	total map[counterKey]uint64
}

// NewPoller reads the tree at root (normally /sys/class/infiniband).
func NewPoller(root string) *Poller {
	return &Poller{root: root, last: map[counterKey]uint64{}, total: map[counterKey]uint64{}}
}

// Poll reads every port. A missing root is no error: the host has no RDMA device.
func (p *Poller) Poll() ([]Port, error) {
	devices, err := os.ReadDir(p.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Port
	for _, dev := range devices {
		portsDir := filepath.Join(p.root, dev.Name(), "ports")
		ports, err := os.ReadDir(portsDir)
		if err != nil {
			continue // not a device directory, or it went away
		}
		for _, pe := range ports {
			num, err := strconv.Atoi(pe.Name())
			if err != nil {
				continue
			}
			out = append(out, p.readPort(dev.Name(), num, filepath.Join(portsDir, pe.Name())))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Device != out[j].Device {
			return out[i].Device < out[j].Device
		}
		return out[i].Port < out[j].Port
	})
	return out, nil
}

func (p *Poller) readPort(device string, port int, dir string) Port {
	out := Port{Device: device, Port: port, Transport: transport(dir), Values: map[string]uint64{}}
	for _, c := range Counters {
		raw, ok := readUint(filepath.Join(dir, "counters", c.Name))
		if !ok {
			continue
		}
		k := counterKey{device, port, c.Name}
		prev, seen := p.last[k]
		switch {
		case !seen:
			p.total[k] = raw
		case raw >= prev:
			p.total[k] += raw - prev
		default: // reset: counting starts again from zero
			p.total[k] += raw
		}
		p.last[k] = raw
		out.Values[c.Name] = p.total[k]
	}
	return out
}

// transport tells InfiniBand from RoCE by the port's link layer.
func transport(portDir string) string {
	b, err := os.ReadFile(filepath.Join(portDir, "link_layer"))
	if err == nil && strings.TrimSpace(string(b)) == "Ethernet" {
		return "roce"
	}
	return "infiniband"
}

func readUint(path string) (uint64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v, err == nil
}

// CounterByName finds a counter's description.
func CounterByName(name string) (Counter, bool) {
	for _, c := range Counters {
		if c.Name == name {
			return c, true
		}
	}
	return Counter{}, false
}
