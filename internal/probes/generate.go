// Package probes loads Fathom's BPF programs (bpf/*.bpf.c, compiled by bpf2go into the
// committed *_bpfel.o objects), attaches them to libraries and tracepoints, and reads
// their events. It knows nothing about OTLP: the receiver turns events into telemetry.
package probes

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" -type cuda_call_event -type cuda_call_py_event -type py_proc -type cuda_api -type memcpy_kind -type event_kind -type drop_reason -type event_header -type process_identity_event -type call_stats cuda ../../bpf/cuda.bpf.c -- -I../../bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" -type sched_event -type sched_wait -type sched_waker -type process_event -type block_io_event -type tcp_retransmit_event -type host_hist -type host_counter host ../../bpf/host.bpf.c -- -I../../bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" hostbaseline ../../bpf/host_baseline.bpf.c -- -I../../bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" -type nccl_call_event -type nccl_call_py_event -type nccl_api nccl ../../bpf/nccl.bpf.c -- -I../../bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" -type rdma_async_event -type rdma_qp_event rdma ../../bpf/rdma.bpf.c -- -I../../bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target amd64 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" -type library_mapped_event -type mapped_library libmap ../../bpf/libmap.bpf.c -- -I../../bpf
