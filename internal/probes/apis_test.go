package probes

import (
	"math/bits"
	"testing"
)

// The CUDA probes read the device-wait APIs as one 64-bit mask: every name must be a
// probed API, and every API ID must fit in it.
func TestDeviceWaitMaskNamesEveryDeviceWaitAPI(t *testing.T) {
	if APICount > 64 {
		t.Fatalf("%d APIs do not fit device_wait_apis (64 bits)", APICount)
	}
	mask := deviceWaitMask()
	if got := bits.OnesCount64(mask); got != len(DeviceWaitAPIs) {
		t.Errorf("mask has %d bits for %d names: a name is not a probed API", got, len(DeviceWaitAPIs))
	}
	for _, a := range APIs {
		want := a.Symbol == "cudaStreamSynchronize" || a.Symbol == "cuMemFree_v2"
		if got := mask&(1<<a.ID) != 0; want && !got {
			t.Errorf("%s (ID %d) missing from the mask", a.Symbol, a.ID)
		}
		if a.Symbol == "cudaLaunchKernel" && mask&(1<<a.ID) != 0 {
			t.Error("cudaLaunchKernel does not wait for the device")
		}
	}
}
