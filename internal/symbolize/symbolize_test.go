package symbolize

import (
	"bufio"
	"debug/elf"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// python311 runs Debian's /usr/bin/python3.11 (not a PIE: its symbols' values are its
// addresses) until the test ends, and returns its pid and where PyEval_EvalCode is.
func python311(t testing.TB) (uint32, uint64) {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3.11", "-c", "import time; print('ready', flush=True); time.sleep(60)")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("Debian's /usr/bin/python3.11: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan struct{})
	go func() { _, _ = bufio.NewReader(out).ReadString('\n'); close(ready) }()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("python3.11 never said it was ready")
	}
	f, err := elf.Open("/usr/bin/python3.11")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Fatalf("/usr/bin/python3.11 is %v, the test expects a fixed-address executable", f.Type)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name == "PyEval_EvalCode" {
			return uint32(cmd.Process.Pid), s.Value
		}
	}
	t.Fatal("python3.11 exports no PyEval_EvalCode")
	return 0, 0
}

// An address inside a function of a live process's executable is named by the
// function's symbol and offset; the walk stops at the first address in no mapping, which
// alone comes back bare.
func TestAddressesAreNamedByTheirFunction(t *testing.T) {
	pid, fn := python311(t)
	s := New("/proc")
	frames := s.Frames(pid, []uint64{fn + 5, 0x10, fn + 5})
	if len(frames) != 1 {
		t.Fatalf("frames %+v: want the first, and the walk cut at the address in no mapping", frames)
	}
	if got := frames[0].String(); got != "PyEval_EvalCode+0x5 (python3.11)" {
		t.Errorf("frame %q, want PyEval_EvalCode+0x5 (python3.11)", got)
	}
	if got := s.Frames(pid, []uint64{0x10}); len(got) != 1 || got[0].String() != "0x10" {
		t.Errorf("an address in no mapping: %+v", got)
	}
	procs, tables, symbols := s.Size()
	if procs != 1 || tables != 1 || symbols < 1000 {
		t.Errorf("cache: %d processes, %d tables, %d symbols", procs, tables, symbols)
	}
}

// A file without symbols gives frames by file and offset.
func TestAStrippedFileGivesOffsets(t *testing.T) {
	f := Frame{Addr: 0x401234, File: "prog", Offset: 0x1234}
	if f.String() != "prog+0x1234" {
		t.Errorf("%q", f.String())
	}
	f.Symbol, f.Offset = "main", 0x1f
	if f.String() != "main+0x1f (prog)" {
		t.Errorf("%q", f.String())
	}
	if !strings.Contains(Frame{Addr: 0x10}.String(), "0x10") {
		t.Error("bare address")
	}
}
