package pyframes

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

type liveThread struct {
	Name     string  `json:"name"`
	Ident    uint64  `json:"ident"`
	NativeID uint64  `json:"native_id"`
	Stack    [][]any `json:"stack"` // [file, qualname, line]
}

// The 3.11 layout is right: from the _PyRuntime symbol of a running python3.11, a walk
// of its memory that follows only LayoutFor(11)'s offsets finds every thread the
// interpreter reports, by native thread id and pthread id, with exactly the stack
// sys._current_frames() gives, innermost first: file, qualified name, line.
func TestReaderMatchesLivePython311(t *testing.T) {
	cmd := exec.Command(python311, "testdata/threads.py")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s (the 3.11 layout check needs Debian's python3.11): %v", python311, err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	lines := make(chan []byte, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadBytes('\n')
		lines <- line
	}()
	var report struct {
		PID     int          `json:"pid"`
		Threads []liveThread `json:"threads"`
	}
	select {
	case line := <-lines:
		if err := json.Unmarshal(line, &report); err != nil {
			t.Fatalf("threads.py's report %q: %v", line, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("threads.py reported nothing in 60 s")
	}
	if report.PID != cmd.Process.Pid || len(report.Threads) != 3 {
		t.Fatalf("report of pid %d with %d threads, want pid %d and 3", report.PID, len(report.Threads), cmd.Process.Pid)
	}
	// The reporting thread is gone from the interpreter before its OS thread exits.
	waitForTasks(t, report.PID, 3)

	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", report.PID))
	if err != nil {
		t.Fatal(err)
	}
	syms := loadedSymbols(t, report.PID, exe, "_PyRuntime", "PyCode_Type", "Py_Version")
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", report.PID))
	if err != nil {
		t.Fatalf("the 3.11 layout check reads the child's memory: %v", err)
	}
	defer mem.Close()

	var version [8]byte // Py_Version is a C unsigned long
	if _, err := mem.ReadAt(version[:], int64(syms["Py_Version"])); err != nil {
		t.Fatalf("reading Py_Version (reading /proc/%d/mem needs ptrace access to the child): %v", report.PID, err)
	}
	minor, err := VersionFromHex(uint32(binary.LittleEndian.Uint64(version[:])))
	if err != nil || minor != 11 {
		t.Fatalf("Py_Version %x: 3.%d, %v; want 3.11", version, minor, err)
	}
	if minor, err := VersionFromFileName(exe); err != nil || minor != 11 {
		t.Fatalf("VersionFromFileName(%s) = %d, %v", exe, minor, err)
	}
	layout, err := LayoutFor(11)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reader{Mem: mem, Layout: layout, CodeType: syms["PyCode_Type"]}
	threads, err := r.Threads(syms["_PyRuntime"])
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) != len(report.Threads) {
		t.Errorf("walk found %d thread states, python reports %d", len(threads), len(report.Threads))
	}
	byTid := map[uint64]Thread{}
	for _, th := range threads {
		byTid[th.NativeThreadID] = th
	}
	for _, want := range report.Threads {
		got, ok := byTid[want.NativeID]
		if !ok {
			t.Errorf("thread %s (tid %d): no thread state with that native_thread_id", want.Name, want.NativeID)
			continue
		}
		if got.ThreadID != want.Ident {
			t.Errorf("thread %s: thread_id %#x, want ident %#x", want.Name, got.ThreadID, want.Ident)
		}
		wantStack := formatStack(t, want.Stack)
		var gotStack []string
		for _, f := range got.Frames {
			gotStack = append(gotStack, fmt.Sprintf("%s:%d %s", f.File, f.Line, f.Function))
		}
		if strings.Join(gotStack, "\n") != strings.Join(wantStack, "\n") {
			t.Errorf("thread %s: walked\n\t%s\nwant\n\t%s", want.Name, strings.Join(gotStack, "\n\t"), strings.Join(wantStack, "\n\t"))
		}
		t.Logf("thread %s tid %d: %d frames, innermost %s", want.Name, want.NativeID, len(gotStack), gotStack[0])
	}
}

func formatStack(t *testing.T, stack [][]any) []string {
	t.Helper()
	var out []string
	for _, f := range stack {
		file, _ := f[0].(string)
		name, _ := f[1].(string)
		line, ok := f[2].(float64)
		if !ok {
			t.Fatalf("frame %v has no line", f)
		}
		out = append(out, fmt.Sprintf("%s:%d %s", file, int(line), name))
	}
	return out
}

func waitForTasks(t *testing.T, pid, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d has %d threads, want %d", pid, len(tasks), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loadedSymbols returns the run-time addresses of the executable's dynamic symbols in
// process pid: the symbol's value plus the load bias, which is 0 for a non-PIE
// executable (Debian's python3.11 is one) and, for a PIE, where /proc/PID/maps shows
// the file's first page minus the lowest PT_LOAD address.
func loadedSymbols(t *testing.T, pid int, exe string, names ...string) map[string]uint64 {
	t.Helper()
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var bias uint64
	if f.Type == elf.ET_DYN {
		lowest := ^uint64(0)
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Vaddr < lowest {
				lowest = p.Vaddr &^ 0xfff
			}
		}
		start, err := mappedAt(pid, exe)
		if err != nil {
			t.Fatal(err)
		}
		bias = start - lowest
	}
	dyn, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range dyn {
		for _, n := range names {
			if s.Name == n && s.Value != 0 {
				out[n] = s.Value + bias
			}
		}
	}
	for _, n := range names {
		if out[n] == 0 {
			t.Fatalf("%s exports no %s", exe, n)
		}
	}
	return out
}

// mappedAt returns the start of the mapping of path's file offset 0 in pid.
func mappedAt(pid int, path string) (uint64, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	clean := filepath.Clean(path)
	for line := range bytes.Lines(maps) {
		fields := strings.Fields(string(line))
		if len(fields) < 6 || fields[2] != "00000000" || fields[5] != clean {
			continue
		}
		start, _, _ := strings.Cut(fields[0], "-")
		return strconv.ParseUint(start, 16, 64)
	}
	return 0, errors.New("no mapping of " + path + " at offset 0")
}
