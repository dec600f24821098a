//go:build linux

package discovery

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fathom-gpu/fathom/internal/probes"
)

// buildProgram compiles a small C program with gcc into dir.
func buildProgram(t *testing.T, dir, name, source string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatalf("needs gcc to build the test's executables (the collector's own cgo build needs it too): %v", err)
	}
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	args := append([]string{"-O1", "-o", bin, src}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// The programs stand for the ways a CUDA program's executable can relate to the
// runtime. Each waits on stdin, so that the live-process test can scan it.
const (
	// The runtime linked in (nvcc's default, libcudart_static.a): the executable
	// defines cudaLaunchKernel.
	runtimeLinkedIn = `#include <stdio.h>
int cudaLaunchKernel(const void *f, int grid, int block, void **args, unsigned long shmem, void *stream) { return 100; }
int main(void) { getchar(); return cudaLaunchKernel(0, 1, 1, 0, 0, 0) == 100 ? 0 : 1; }
`
	// A program that calls a libcudart it loads: the symbol is undefined in it (a weak
	// reference, so that it links without a libcudart).
	runtimeCalledOnly = `#include <stdio.h>
extern int cudaLaunchKernel(const void *f, int grid, int block, void **args, unsigned long shmem, void *stream) __attribute__((weak));
int main(void) { getchar(); return cudaLaunchKernel ? cudaLaunchKernel(0, 1, 1, 0, 0, 0) : 0; }
`
)

// fakeProc lays out procRoot/PID as the kernel does for a process whose executable is
// bin: maps (no probed library mapped), exe (a link to the path inside the process's
// mount namespace) and root, under which that path opens.
func fakeProc(t *testing.T, procRoot string, pid int, bin, inside string) {
	t.Helper()
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	target := filepath.Join(dir, "root", inside)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, data, 0o755); err != nil {
		t.Fatal(err)
	}
	maps := "55d0c0000000-55d0c0001000 r-xp 00001000 08:01 1234 " + inside + "\n"
	if err := os.WriteFile(filepath.Join(dir, "maps"), []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(inside, filepath.Join(dir, "exe")); err != nil {
		t.Fatal(err)
	}
}

// An executable that defines a probed runtime function, in its dynamic symbols (the
// runtime linked in and exported with -rdynamic) or only in its .symtab (nvcc's
// default), is a libcudart to probe, reached through /proc/PID/root; one that only
// calls the function is not, nor is a stripped one.
func TestScanFindsAnExecutableThatCarriesTheRuntime(t *testing.T) {
	build := t.TempDir()
	exported := buildProgram(t, build, "exported", runtimeLinkedIn, "-rdynamic")
	symtabOnly := buildProgram(t, build, "symtab-only", runtimeLinkedIn)
	caller := buildProgram(t, build, "caller", runtimeCalledOnly, "-rdynamic")
	stripped := buildProgram(t, build, "stripped", runtimeLinkedIn, "-s")

	procRoot := t.TempDir()
	cases := []struct {
		pid   int
		bin   string
		found bool
	}{{101, exported, true}, {102, symtabOnly, true}, {103, caller, false}, {104, stripped, false}}
	for _, c := range cases {
		fakeProc(t, procRoot, c.pid, c.bin, "/opt/app/bin/"+filepath.Base(c.bin))
	}
	for _, c := range cases {
		got, err := ScanPID(procRoot, uint32(c.pid))
		if err != nil {
			t.Fatal(err)
		}
		inside := "/opt/app/bin/" + filepath.Base(c.bin)
		want := Mapping{PID: uint32(c.pid), Path: inside, HostPath: filepath.Join(procRoot, strconv.Itoa(c.pid), "root", inside), Library: probes.LibCUDART}
		switch {
		case c.found && (len(got) != 1 || got[0] != want):
			t.Errorf("%s: scan found %+v, want %+v", filepath.Base(c.bin), got, want)
		case !c.found && len(got) != 0:
			t.Errorf("%s: scan found %+v, want nothing", filepath.Base(c.bin), got)
		}
	}
}

// The same on a live process, through the real /proc: the executable is found by its
// exe link, once (not again for its own line in maps).
func TestScanFindsARunningExecutableThatCarriesTheRuntime(t *testing.T) {
	bin := buildProgram(t, t.TempDir(), "static-runtime", runtimeLinkedIn, "-rdynamic")
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	pid := cmd.Process.Pid
	// Wait for the exec: until then /proc/PID/exe is the test binary.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); exe == bin && mapsName(t, pid, bin) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d never ran %s", pid, bin)
		}
	}
	got, err := ScanPID("/proc", uint32(pid))
	if err != nil {
		t.Fatal(err)
	}
	want := Mapping{PID: uint32(pid), Path: bin, HostPath: filepath.Join("/proc", strconv.Itoa(pid), "root", bin), Library: probes.LibCUDART}
	if len(got) != 1 || got[0] != want {
		t.Errorf("scan found %+v, want %+v", got, want)
	}
}

func mapsName(t *testing.T, pid int, path string) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), " "+path) {
			return true
		}
	}
	return false
}
