package pystacks

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/pyframes"
)

func TestTheInterpreterMappingIsLibpythonFirst(t *testing.T) {
	maps := strings.Join([]string{
		"00400000-00420000 r--p 00000000 fe:01 100 /usr/bin/python3.11",
		"7f0000000000-7f0000100000 r--p 00000000 fe:01 200 /opt/conda/lib/libpython3.12.so.1.0",
		"7f0000100000-7f0000200000 r-xp 00100000 fe:01 200 /opt/conda/lib/libpython3.12.so.1.0",
		"7f0000300000-7f0000400000 r--p 00000000 fe:01 300 /usr/lib/libc.so.6",
	}, "\n")
	path, start, minor, err := interpreterMapping([]byte(maps))
	if err != nil || path != "/opt/conda/lib/libpython3.12.so.1.0" || start != 0x7f0000000000 || minor != 12 {
		t.Errorf("got %q at %#x, 3.%d, %v; want libpython3.12 at 0x7f0000000000", path, start, minor, err)
	}
	path, start, minor, err = interpreterMapping([]byte("00400000-00420000 r--p 00000000 fe:01 100 /usr/bin/python3.11\n"))
	if err != nil || path != "/usr/bin/python3.11" || start != 0x400000 || minor != 11 {
		t.Errorf("got %q at %#x, 3.%d, %v; want python3.11 at 0x400000", path, start, minor, err)
	}
	if path, _, _, err := interpreterMapping([]byte("7f0000000000-7f0000100000 r--p 00000000 fe:01 200 /usr/lib/libpython3.13t.so.1.0\n")); path != "" || !errors.Is(err, pyframes.ErrFreeThreaded) {
		t.Errorf("a free-threaded libpython: got %q, %v; want ErrFreeThreaded", path, err)
	}
	if path, _, _, err := interpreterMapping([]byte("00400000-00420000 r--p 00000000 fe:01 100 /usr/bin/bash\n")); path != "" || err != nil {
		t.Errorf("bash: got %q, %v; want nothing", path, err)
	}
}

// Find, on Debian's live python3.11: _PyRuntime and PyCode_Type where the process has
// them, so that a walk from them reaches the running script's frame.
func TestFindLocatesALivePythonRuntime(t *testing.T) {
	cmd := exec.Command("/usr/bin/python3.11", "-c", "import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("Debian's /usr/bin/python3.11 (apt-get install python3): %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan string, 1)
	go func() { line, _ := bufio.NewReader(out).ReadString('\n'); ready <- line }()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("python3.11 never said it was ready")
	}
	time.Sleep(100 * time.Millisecond) // into the sleep
	f := &Finder{ProcRoot: "/proc"}
	p, err := f.Find(uint32(cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if p.Minor != 11 || p.Runtime == 0 || p.CodeType == 0 || !strings.HasSuffix(p.File, "python3.11") {
		t.Fatalf("found %+v", p)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	r := &pyframes.Reader{Mem: mem, Layout: p.Layout, CodeType: p.CodeType}
	threads, err := r.Threads(p.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	if len(threads) != 1 || len(threads[0].Frames) != 1 {
		t.Fatalf("threads %+v, want the main thread in one frame", threads)
	}
	if fr := threads[0].Frames[0]; fr.File != "<string>" || fr.Function != "<module>" || fr.Line != 3 {
		t.Errorf("frame %+v, want <module> at <string>:3", fr)
	}
	if _, err := f.Find(uint32(os.Getpid())); !errors.Is(err, ErrNotPython) {
		t.Errorf("the Go test binary: %v, want ErrNotPython", err)
	}
}
