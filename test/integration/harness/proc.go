// Package harness starts real Kubernetes parts for gpuslice's integration
// tests and benchmarks: etcd, kube-apiserver, kube-scheduler (stock or
// gpuslice), and KWOK, built from source by hack/k8s/build.sh. Everything
// listens on loopback only and is stopped by the caller.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuslice/gpuslice/test/k8sversion"
)

// Binaries locates the built Kubernetes binaries.
type Binaries struct{ Dir string }

// FindBinaries returns the binaries from $GPUSLICE_K8S_BIN, else from the
// build cache, or an error saying how to build them.
func FindBinaries() (Binaries, error) {
	dir := os.Getenv("GPUSLICE_K8S_BIN")
	if dir == "" {
		cache := os.Getenv("GPUSLICE_CACHE")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return Binaries{}, fmt.Errorf("no home directory: %w", err)
			}
			cache = filepath.Join(home, ".cache", "gpuslice")
		}
		v, err := k8sversion.Read()
		if err != nil {
			return Binaries{}, err
		}
		dir = filepath.Join(cache, "k8s", v)
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kubectl", "kwok"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return Binaries{}, fmt.Errorf("%s not built (run hack/k8s/build.sh or make k8s-bins): %w", b, err)
		}
	}
	return Binaries{Dir: dir}, nil
}

// Path returns the path of one binary.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// Process is a started child process whose output goes to a log file.
type Process struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error         // its exit status, valid once done is closed
}

// Start runs bin with args, logging to dir/name.log.
func Start(dir, name, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, then SIGKILL after a grace period, and waits.
func (p *Process) Stop() {
	if p == nil {
		return
	}
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Kill sends SIGKILL to the process group (no cleanup of any kind) and waits.
func (p *Process) Kill() {
	if exited, _ := p.Exited(); exited {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Tail returns the end of the process log, for failure messages.
func (p *Process) Tail() string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitFor polls cond every interval until it returns true, an error, or ctx ends.
func WaitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting: %w", ctx.Err())
		case <-t.C:
		}
	}
}

var errExited = errors.New("process exited")

func exitedErr(p *Process) error {
	if exited, err := p.Exited(); exited {
		return fmt.Errorf("%s: %w (%w):\n%s", p.Name, errExited, err, p.Tail())
	}
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// CPUSeconds returns the user+system CPU time the process has used so far.
func (p *Process) CPUSeconds() (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %s: %w", p.Name, err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time of %s: short stat", p.Name)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu time of %s: bad stat", p.Name)
	}
	return (ut + st) / 100, nil // USER_HZ
}

// RunDelays adds to into the cumulative run delay (ns runnable but waiting
// for a CPU, /proc/PID/task/TID/schedstat's second field) of each thread of
// pid, by thread ID. A process that has exited adds nothing. Share tests
// allow for it: a tenant waiting for a CPU leaves granted time unused.
func RunDelays(pid int, into map[int]int64) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/schedstat", pid, tid))
		if err != nil {
			continue
		}
		var run, wait int64
		if c, _ := fmt.Sscanf(string(b), "%d %d", &run, &wait); c == 2 {
			into[tid] = wait
		}
	}
}

// Children lists the processes whose parent is pid (from /proc/*/stat).
func Children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		var state string
		var ppid int
		if i < 0 {
			continue
		}
		if n, _ := fmt.Sscanf(string(b[i+1:]), " %s %d", &state, &ppid); n == 2 && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}
