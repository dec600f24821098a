package rdmasysfs

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// WriteFixture writes a sysfs-like tree: root/DEVICE/ports/PORT/{link_layer,counters/NAME}.
func writeFixture(t *testing.T, root, device string, port int, linkLayer string, values map[string]uint64) {
	t.Helper()
	dir := filepath.Join(root, device, "ports", strconv.Itoa(port))
	if err := os.MkdirAll(filepath.Join(dir, "counters"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "link_layer"), []byte(linkLayer+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, v := range values {
		if err := os.WriteFile(filepath.Join(dir, "counters", name), []byte(strconv.FormatUint(v, 10)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPollerTotalsIncreasesAndSurvivesResets(t *testing.T) {
	root := t.TempDir()
	writeFixture(t, root, "mlx5_0", 1, "InfiniBand", map[string]uint64{"port_rcv_errors": 3, "port_xmit_data": 1000, "symbol_error": 0})
	writeFixture(t, root, "mlx5_1", 1, "Ethernet", map[string]uint64{"link_downed": 1})
	p := NewPoller(root)
	ports, err := p.Poll()
	if err != nil || len(ports) != 2 {
		t.Fatalf("ports %+v err %v", ports, err)
	}
	if ports[0].Device != "mlx5_0" || ports[0].Transport != "infiniband" || ports[1].Transport != "roce" {
		t.Fatalf("ports %+v", ports)
	}
	if v := ports[0].Values; v["port_rcv_errors"] != 3 || v["port_xmit_data"] != 1000 || len(v) != 3 {
		t.Fatalf("first poll %v", v)
	}
	writeFixture(t, root, "mlx5_0", 1, "InfiniBand", map[string]uint64{"port_rcv_errors": 10, "port_xmit_data": 1500, "symbol_error": 2})
	writeFixture(t, root, "mlx5_1", 1, "Ethernet", map[string]uint64{"link_downed": 0}) // reset
	ports, _ = p.Poll()
	if v := ports[0].Values; v["port_rcv_errors"] != 10 || v["port_xmit_data"] != 1500 || v["symbol_error"] != 2 {
		t.Fatalf("second poll %v", v)
	}
	writeFixture(t, root, "mlx5_1", 1, "Ethernet", map[string]uint64{"link_downed": 2})
	ports, _ = p.Poll()
	if v := ports[1].Values["link_downed"]; v != 3 {
		t.Fatalf("link_downed after a reset and 2 more: %d, want 3", v)
	}
}

func TestPollerWithoutHCAFindsNothing(t *testing.T) {
	ports, err := NewPoller(filepath.Join(t.TempDir(), "absent")).Poll()
	if err != nil || len(ports) != 0 {
		t.Fatalf("ports %v err %v", ports, err)
	}
}
