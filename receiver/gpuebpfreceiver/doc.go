// Package gpuebpfreceiver watches every CUDA process on the host from the kernel with
// eBPF (uprobes on libcudart and libcuda, tracepoints for scheduling, process
// lifecycle, memory, block I/O and TCP) and emits what it sees as OTLP metrics and
// logs. One BPF controller serves both signals.
package gpuebpfreceiver

//go:generate go tool mdatagen metadata.yaml
