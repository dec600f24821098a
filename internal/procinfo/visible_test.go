package procinfo

import "testing"

// Ordinals map through CUDA_VISIBLE_DEVICES as CUDA maps them: by index, by UUID (or a
// prefix of one), not at all past the list or for a MIG instance; unset, each ordinal
// is the GPU of that index.
func TestVisibleDevicesMapOrdinalsToGPUs(t *testing.T) {
	type want struct {
		index int
		uuid  string
		ok    bool
	}
	for _, c := range []struct {
		value   string
		set     bool
		ordinal int
		want    want
	}{
		{"", false, 3, want{3, "", true}},
		{"3,1", true, 0, want{3, "", true}},
		{"3, 1", true, 1, want{1, "", true}},
		{"3,1", true, 2, want{0, "", false}},
		{"GPU-5c1d2a33,0", true, 0, want{0, "GPU-5c1d2a33", true}},
		{"MIG-4b1f", true, 0, want{0, "", false}},
		{"", true, 0, want{0, "", false}},
		{"2", true, -1, want{0, "", false}},
	} {
		index, uuid, ok := ParseVisibleDevices(c.value, c.set).GPU(c.ordinal)
		if got := (want{index, uuid, ok}); got != c.want {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q (set %v), ordinal %d: %+v, want %+v", c.value, c.set, c.ordinal, got, c.want)
		}
	}
}
