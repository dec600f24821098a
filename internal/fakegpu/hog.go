package fakegpu

import (
	"bufio"
	"bytes"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Hog is a started fakegpu-hog: a CPU-bound process of its own, under a thread name
// (comm) the test chose, the other work that preempts a dispatcher sharing its CPU.
type Hog struct {
	Cmd  *exec.Cmd
	Pid  int
	done chan struct{}
}

// StartHog starts a fakegpu-hog named name (at most 15 bytes) pinned to cpu (-1: not
// pinned). It returns once the hog spins under that name on that CPU, and it is killed
// at test cleanup if Stop was not called first.
func StartHog(t testing.TB, p Paths, name string, cpu int) *Hog {
	t.Helper()
	h := &Hog{done: make(chan struct{})}
	// The hog's own bound is long enough for any test and ends it if the test's
	// cleanup never runs.
	h.Cmd = exec.Command(p.Hog, "--name", name, "--cpu", strconv.Itoa(cpu), "--seconds", "600")
	var stderr bytes.Buffer
	h.Cmd.Stderr = &stderr
	stdout, err := h.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.Hog, err)
	}
	h.Pid = h.Cmd.Process.Pid
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		h.Cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(h.Stop)
	select {
	case line := <-ready:
		if line != "ready\n" {
			h.Stop()
			t.Fatalf("fakegpu-hog --name %s --cpu %d did not start: %q\nstderr:\n%s", name, cpu, line, stderr.String())
		}
	case <-time.After(10 * time.Second):
		h.Stop()
		t.Fatalf("fakegpu-hog --name %s did not say ready within 10s", name)
	}
	return h
}

// Stop kills the hog and waits for it to be gone.
func (h *Hog) Stop() {
	_ = h.Cmd.Process.Kill()
	<-h.done
}

// Renice sets the nice value of one thread (a tid; a single-threaded process's pid).
// Below 0 it needs CAP_SYS_NICE, which the privileged tests have as root.
func Renice(t testing.TB, tid, nice int) {
	t.Helper()
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
		t.Fatalf("setpriority(%d, %d): %v", tid, nice, err)
	}
}
