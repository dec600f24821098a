package discovery

import (
	"testing"

	"github.com/fathom-gpu/fathom/internal/probes"
)

func TestMatchLibrary(t *testing.T) {
	cases := map[string]probes.Library{
		"/usr/local/cuda/lib64/libcudart.so.12":                                        probes.LibCUDART,
		"/usr/local/cuda/lib64/libcudart.so.12.4.127":                                  probes.LibCUDART,
		"/venv/lib/python3.11/site-packages/torch/lib/libcudart-d0da41ae.so.11.0":      probes.LibCUDART,
		"/venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.11.0": probes.LibCUDART,
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1":                                       probes.LibCUDA,
		"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15":                               probes.LibCUDA,
		"/usr/lib/x86_64-linux-gnu/libnccl.so.2":                                       probes.LibNCCL,
		"/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5":                                  probes.LibNCCL,
		"/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2":              probes.LibNCCL,
		"/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so":                probes.LibNCCL,
		"/usr/lib/x86_64-linux-gnu/libibverbs.so.1":                                    probes.LibIBVerbs,
		"/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.50.0":                            probes.LibIBVerbs,
	}
	for path, want := range cases {
		if got, ok := MatchLibrary(path); !ok || got != want {
			t.Errorf("%s: got %q %v, want %q", path, got, ok, want)
		}
	}
	for _, path := range []string{"/usr/lib/libcudnn.so.9", "/usr/lib/libcuda_stub.so", "/usr/lib/libcudart_static.a", "/lib/libcudart.so.12.bak", "/usr/lib/libnccl-net.so", "/usr/lib/libnccl_static.a", "/usr/lib/libibverbs/libmlx5-rdmav34.so"} {
		if got, ok := MatchLibrary(path); ok {
			t.Errorf("%s matched %q", path, got)
		}
	}
}
