// Package bpfhost says whether this process can load and attach Fathom's BPF programs:
// the privileged tests and the demo ask it before they try.
package bpfhost

import "os"

// Missing names what this process lacks to run the eBPF receiver (root, kernel BTF,
// tracefs), or "" when nothing is.
func Missing() string {
	switch {
	case os.Geteuid() != 0:
		return "root (loading BPF and attaching uprobes)"
	case !exists("/sys/kernel/btf/vmlinux"):
		return "kernel BTF (/sys/kernel/btf/vmlinux)"
	case !exists("/sys/kernel/tracing/events") && !exists("/sys/kernel/debug/tracing/events"):
		return "tracefs (mount -t tracefs tracefs /sys/kernel/tracing)"
	}
	return ""
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
