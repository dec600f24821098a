// Package collectorrun starts fathom collector processes and stops them: the one way the
// demo and the tests run a collector (the tests through internal/testsupport/collectortest).
// A collector is the real binary with real config files, its output kept, stopped with
// SIGTERM as a service manager stops it.
package collectorrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fathom-gpu/fathom/internal/collectorconfig"
)

// Spec says how to run one collector.
type Spec struct {
	// Bin is the fathom binary.
	Bin string
	// Configs are the --config files, merged by the collector in order.
	Configs []string
	// Wrapper, when set, runs the collector under a command (e.g. `unshare --net`) given
	// the binary and its flags as its last arguments. It must exec them in its own
	// process, so that Pid and Stop reach the collector itself.
	Wrapper []string
	// Env is added to this process's environment (KEY=VALUE).
	Env []string
	// Output receives the collector's stdout and stderr (nil: /dev/null).
	Output io.Writer
	// OwnGroup runs the collector in a process group of its own, which Stop signals
	// whole, and kills it when the thread that started it dies (the demo's collectors
	// must not outlive a demo that is killed).
	OwnGroup bool
}

// Collector is a running collector.
type Collector struct {
	cmd      *exec.Cmd
	ownGroup bool
	done     chan struct{}
	err      error
}

// Start starts the collector; it does not wait for it to be up (WaitHTTP).
func Start(s Spec) (*Collector, error) {
	if s.Bin == "" {
		return nil, errors.New("collectorrun: no binary")
	}
	args := append(append([]string(nil), s.Wrapper...), s.Bin)
	for _, c := range s.Configs {
		args = append(args, "--config", c)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), s.Env...)
	if s.Output != nil {
		cmd.Stdout, cmd.Stderr = s.Output, s.Output
		// A child the collector left behind holding its output must not keep the wait
		// (and Stop) from returning once the collector itself has exited.
		cmd.WaitDelay = time.Second
	}
	if s.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("collectorrun: starting %s: %w", s.Bin, err)
	}
	c := &Collector{cmd: cmd, ownGroup: s.OwnGroup, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// Pid is the collector's process id.
func (c *Collector) Pid() int { return c.cmd.Process.Pid }

// Done is closed once the process has exited.
func (c *Collector) Done() <-chan struct{} { return c.done }

// ExitError is what the process's wait returned once it has exited (nil for exit 0).
func (c *Collector) ExitError() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// ExitCode is the process's exit code once it has exited, -1 before or when a signal
// ended it.
func (c *Collector) ExitCode() int {
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// ErrExited is returned by the waits when the collector exits before what they wait for.
var ErrExited = errors.New("the collector exited")

// WaitHTTP polls url until it answers 200 (a health check once every pipeline has
// started), the process exits or ctx ends; it returns the answer's body.
func (c *Collector) WaitHTTP(ctx context.Context, url string) ([]byte, error) {
	client := &http.Client{Timeout: time.Second}
	for {
		if err := c.exitedOr(ctx); err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", url, err)
		}
		if resp, err := client.Get(url); err == nil {
			body, readErr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && readErr == nil {
				return body, nil
			}
		}
		if err := c.sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", url, err)
		}
	}
}

// WaitListening polls until addr accepts a TCP connection, the process exits or ctx
// ends. A collector starts its extensions before its receivers, so an extension's API
// can answer while the OTLP listeners are not up yet.
func (c *Collector) WaitListening(ctx context.Context, addr string) error {
	for {
		if err := c.exitedOr(ctx); err != nil {
			return fmt.Errorf("waiting for %s to listen: %w", addr, err)
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return nil
		}
		if err := c.sleep(ctx, 50*time.Millisecond); err != nil {
			return fmt.Errorf("waiting for %s to listen: %w", addr, err)
		}
	}
}

// Stop sends SIGTERM and waits up to timeout for the process to exit, returning its
// exit code. One that does not exit in time gets SIGQUIT, which makes the Go runtime
// print every goroutine's stack into the output (where its shutdown hung), then
// SIGKILL; Stop then returns an error.
func (c *Collector) Stop(timeout time.Duration) (int, error) {
	c.signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return c.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
	}
	c.signal(syscall.SIGQUIT)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.Kill()
	}
	return -1, fmt.Errorf("collectorrun: the collector did not exit within %s of SIGTERM", timeout)
}

// Kill ends the process (and its group, if it has its own) at once and waits for it.
func (c *Collector) Kill() {
	c.signal(syscall.SIGKILL)
	<-c.done
}

func (c *Collector) signal(sig syscall.Signal) {
	select {
	case <-c.done:
		return
	default:
	}
	if c.ownGroup {
		_ = syscall.Kill(-c.cmd.Process.Pid, sig)
		return
	}
	_ = c.cmd.Process.Signal(sig)
}

func (c *Collector) exitedOr(ctx context.Context) error {
	select {
	case <-c.done:
		return fmt.Errorf("%w (%v)", ErrExited, c.err)
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

func (c *Collector) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-c.done:
		return fmt.Errorf("%w (%v)", ErrExited, c.err)
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// FreePort returns a loopback TCP port that was free a moment ago, and never one it
// returned before in this process: the port is closed again at once, so the kernel may
// hand it out a second time before the collector it was meant for binds it, and two
// listeners of one run would then collide.
func FreePort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, taken := givenPorts.LoadOrStore(port, true); !taken {
			return port, nil
		}
	}
	return 0, errors.New("collectorrun: no loopback port that this process has not handed out already")
}

// givenPorts are the ports FreePort has returned in this process.
var givenPorts sync.Map

// LoopbackEnv gives each variable through which the shipped config listens
// (collectorconfig.Listeners) a free loopback port: "127.0.0.1:PORT", or the bare port
// for a variable ending in _PORT. It returns the environment (KEY=VALUE) and the
// values by variable.
func LoopbackEnv(shipped string) ([]string, map[string]string, error) {
	vars, err := collectorconfig.Listeners(shipped)
	if err != nil {
		return nil, nil, err
	}
	env := make([]string, 0, len(vars))
	values := make(map[string]string, len(vars))
	for _, v := range vars {
		port, err := FreePort()
		if err != nil {
			return nil, nil, err
		}
		value := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if strings.HasSuffix(v, "_PORT") {
			value = strconv.Itoa(port)
		}
		values[v] = value
		env = append(env, v+"="+value)
	}
	return env, values, nil
}
