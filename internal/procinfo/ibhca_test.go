package procinfo

import "testing"

// NCCL_IB_HCA as NCCL reads it: prefixes unless "=", exclusions with "^", ports after
// ":"; unset binds a rank to no device.
func TestHCAsSayWhichPortsARankUses(t *testing.T) {
	for _, c := range []struct {
		value  string
		device string
		port   int
		uses   bool
	}{
		{"", "mlx5_0", 1, false},
		{"mlx5_0:1", "mlx5_0", 1, true},
		{"mlx5_0:1", "mlx5_0", 2, false},
		{"mlx5_0:1", "mlx5_1", 1, false},
		{"mlx5_1", "mlx5_10", 1, true}, // a prefix, as NCCL matches it
		{"=mlx5_1", "mlx5_10", 1, false},
		{"=mlx5_1,mlx5_3:1", "mlx5_3", 1, true},
		{"mlx5", "mlx5_7", 2, true},
		{"^mlx5_2", "mlx5_2", 1, false},
		{"^mlx5_2", "mlx5_3", 1, true},
		{"^=mlx5_2:1", "mlx5_2", 2, true},
		{" , ", "mlx5_0", 1, false},
	} {
		if got := ParseHCAs(c.value).Uses(c.device, c.port); got != c.uses {
			t.Errorf("NCCL_IB_HCA=%q: uses %s port %d = %v, want %v", c.value, c.device, c.port, got, c.uses)
		}
	}
}

func TestHCAsAreBounded(t *testing.T) {
	long := ""
	for range 1000 {
		long += "mlx5_0:1,"
	}
	if n := len(ParseHCAs(long).Entries); n != maxHCAEntries {
		t.Errorf("%d entries kept, want %d", n, maxHCAEntries)
	}
}
