// Package runner starts a command as one gpuslice group: the interception
// library preloaded, the group named in its environment, and the group's
// state cleaned up when the command ends.
// Before that, PrepareRun (prepare.go) makes sure a time-slice daemon runs
// (internal/timeslice/client) and makes the group through the groups manager
// (internal/groupmgr), which returns once the daemon has written the group's
// limit into its state file.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/paths"
)

// Spec is one command to run in a group.
type Spec struct {
	Command []string
	// Group names the group; KeepGroup leaves its directory behind at exit.
	Group     string
	KeepGroup bool
	// MemoryLimit is the per-GPU limit in bytes (0: none): the group's
	// settings (PrepareRun), applied by the time-slice daemon; not in the environment.
	MemoryLimit uint64
	// VisibleGPUs are the UUIDs the command may use (empty: all).
	VisibleGPUs []string
	RunDir      string
	// Library is the path of libgpuslice.so.
	Library string
	// SimLibDir, when set, is put first on LD_LIBRARY_PATH (simulated GPU).
	SimLibDir string
	// ExtraEnv is added last (KEY=VALUE), e.g. by the node-side options.
	ExtraEnv []string
	Env      []string
	// InGroup runs the command with Env as it is: the process is in a group
	// already (a run inside a run), which it keeps; no group is made or removed.
	InGroup bool
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
}

// Environ is the command's environment: base plus gpuslice's variables,
// replacing any earlier value of the same key.
func Environ(s *Spec) []string {
	set := map[string]string{
		"GPUSLICE_GROUP":      s.Group,
		"GPUSLICE_GROUP_FILE": groupstate.Path(s.RunDir, s.Group),
		// the file was made before the command (groupmgr Create): a member never makes it again
		"GPUSLICE_GROUP_MANAGED": "1",
		"GPUSLICE_RUN_DIR":       s.RunDir,
		"LD_PRELOAD":             prependList(lookup(s.Env, "LD_PRELOAD"), s.Library, " "),
	}
	if len(s.VisibleGPUs) > 0 {
		set["CUDA_VISIBLE_DEVICES"] = strings.Join(s.VisibleGPUs, ",")
	}
	if s.SimLibDir != "" {
		set["LD_LIBRARY_PATH"] = prependList(lookup(s.Env, "LD_LIBRARY_PATH"), s.SimLibDir, ":")
	}
	out := make([]string, 0, len(s.Env)+len(set)+len(s.ExtraEnv))
	for _, kv := range s.Env {
		// The limit is the group's, in its state file (the time-slice daemon's):
		// an inherited variable is no channel for it.
		k, _, _ := strings.Cut(kv, "=")
		if _, replaced := set[k]; !replaced && k != "GPUSLICE_MEMORY_LIMIT" {
			out = append(out, kv)
		}
	}
	for _, k := range sortedKeys(set) {
		out = append(out, k+"="+set[k])
	}
	return append(out, s.ExtraEnv...)
}

// Run starts the command, waits for it, and returns its exit code (128+signal
// if it was killed). Cancelling ctx sends SIGTERM to the command and keeps waiting.
func Run(ctx context.Context, s *Spec) (int, error) {
	if len(s.Command) == 0 {
		return 0, errors.New("no command to run")
	}
	logger := klog.FromContext(ctx).WithValues("group", s.Group)
	env := s.Env
	if !s.InGroup {
		env = Environ(s)
		dir := paths.GroupDir(s.RunDir, s.Group)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, fmt.Errorf("create group directory: %w", err)
		}
		if !s.KeepGroup {
			defer func() {
				// Not on stderr: it is the command's (only its documented notices go there).
				if err := removeGroupDir(dir); err != nil {
					logger.V(1).Info("group directory left behind", "dir", dir, "err", err)
				}
			}()
		}
	}
	path, err := exec.LookPath(s.Command[0])
	if err != nil {
		return s.notStarted(err, errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)), nil
	}
	cmd := &exec.Cmd{Path: path, Args: s.Command, Env: env, Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr}
	// The terminal delivers Ctrl-C to the command itself; gpuslice stays to clean up.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	defer signal.Stop(interrupts)
	if err := cmd.Start(); err != nil {
		return s.notStarted(err, false), nil // found: a bad interpreter, format or permission
	}
	logger.V(2).Info("started", "pid", cmd.Process.Pid, "limit", s.MemoryLimit)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case <-interrupts:
		case <-ctx.Done():
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
				logger.Error(err, "forward SIGTERM")
			}
			ctx = context.Background()
		case err := <-done:
			return exitStatus(err)
		}
	}
}

// Exit codes of a command that did not start, as shells (POSIX), env,
// docker run and kubectl exec give them.
const (
	ExitNotFound      = 127 // no such command
	ExitCannotExecute = 126 // found, but it cannot be executed
)

// notStarted says on the command's stderr, as a shell does, why the command
// did not start, and returns its exit code: ExitNotFound when it was not
// found, else ExitCannotExecute.
func (s *Spec) notStarted(err error, notFound bool) int {
	if s.Stderr != nil {
		fmt.Fprintf(s.Stderr, "gpuslice: %s: %v\n", s.Command[0], err) //nolint:errcheck // the command's stderr: nowhere else to say it
	}
	if notFound {
		return ExitNotFound
	}
	return ExitCannotExecute
}

func exitStatus(err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return 0, fmt.Errorf("wait: %w", err)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return exit.ExitCode(), nil
}

func lookup(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// prependList puts item first in a sep-separated list, dropping duplicates of it.
func prependList(list, item, sep string) string {
	out := []string{item}
	for _, e := range strings.Split(list, sep) {
		if e != "" && filepath.Clean(e) != filepath.Clean(item) {
			out = append(out, e)
		}
	}
	return strings.Join(out, sep)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// removeGroupDir removes a run's group directory (group.Tree.Remove: while
// the time-slice daemon may still be writing its read-back files into it).
func removeGroupDir(dir string) error {
	if err := (group.Tree{Dir: filepath.Dir(dir)}).Remove(filepath.Base(dir)); err != nil {
		return fmt.Errorf("remove group directory: %w", err)
	}
	return nil
}
