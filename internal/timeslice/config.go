// Package timeslice is the time-slice daemon (`gpuslice node`): it owns GPU
// time. Client libraries connect over a unix socket (internal/proto), the
// daemon identifies each caller through the kernel (SO_PEERCRED,
// /proc/<pid>/cgroup and the group file it was started with), runs one
// time-slice policy (internal/policy) per GPU with one tenant per
// group, and applies the group tree (internal/group) to running processes.
// Its Go client, and starting and supervising it, are internal/timeslice/client.
// See docs/timeslice.md.
package timeslice

import (
	"context"
	"fmt"
	"time"

	"github.com/gpuslice/gpuslice/internal/ctxprobe"
	"github.com/gpuslice/gpuslice/internal/elastic"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/policy"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// Config is the daemon's configuration.
type Config struct {
	// Socket is the unix socket path. The single-instance lock is a flock on
	// RunDir itself.
	Socket string
	// RunDir holds the group tree (RunDir/groups) and status.json.
	RunDir string
	Policy policy.Config
	// StatusEvery is how often read-back files and status.json are refreshed.
	StatusEvery time.Duration
	// HelloTimeout bounds how long a new connection may take to say hello.
	HelloTimeout time.Duration
	// MaxGPUs bounds the number of distinct GPUs (policy instances).
	MaxGPUs int
	// ListGPUs lists the GPUs of the node (NVML): the only GPUs the daemon
	// schedules, whatever clients send.
	ListGPUs func() ([]proto.UUID, error)
	// MaxConns, MaxConnsPerUID (per uid; root in the daemon's pid namespace exempt,
	// root in another one per namespace) and MaxConnsPerGroup bound the
	// connections served; more are refused (proto.ErrBusy). MaxConns is
	// lowered to the descriptor limit if that is smaller.
	MaxConns, MaxConnsPerUID, MaxConnsPerGroup int
	// ProcRoot is where /proc is mounted (tests may point elsewhere).
	ProcRoot string
	// IdleExit, when positive, stops the daemon once no client has been
	// connected for that long (daemons started by `gpuslice run` use it; the
	// next run starts a new one, and the group tree on disk keeps the settings).
	IdleExit time.Duration
	// Elastic tunes elastic memory (borrow grants and reclaims).
	Elastic elastic.Config
	// DeviceMemory reads a GPU's memory from the driver; nil: no elastic
	// memory (borrows are refused with a reason).
	DeviceMemory DeviceMemory
	// ContextProbe measures what a context takes on each kind of device of
	// the node (internal/ctxprobe: a process of the node's own), run at the
	// daemon's start and when the driver lists a GPU the daemon did not
	// know; its seeds go into every group's state file. Nil, or a failed
	// run (logged): groups reserve first contexts as before (the seed
	// gathered from the groups' measurements, else the guess).
	// A run is asked for the devices to measure (ctxprobe.Want: every
	// device at the start; then the GPUs added, whose kind is not measured).
	ContextProbe func(context.Context, ctxprobe.Want) (ctxprobe.Result, error)
	// ContextProbeRetry is the first wait before a probe run that failed or
	// found an implausible figure runs again (doubled at each failure, at
	// most 30 minutes).
	ContextProbeRetry time.Duration
	// Observe, when set, is told of every slice handed out and of every
	// member's wait for one, as the daemon decides them (tests and benchmarks
	// assert on these: the machine's load does not change them). Called with a
	// GPU's lock held: it must return at once.
	Observe *Observer
}

// Observer receives the daemon's scheduling events (Config.Observe); either
// function may be nil.
type Observer struct {
	// Slice: a slice of length was handed to group on gpu (a new grant, or a
	// renewal of the running one); turn counts the slices handed out on that
	// GPU, from 1; contended: a new grant, and since the previous slice no
	// group's turn passed while it had no work (the policy banked it a slice).
	Slice func(gpu proto.UUID, group string, length time.Duration, turn uint64, contended bool)
	// Wait: a member of group that asked for the GPU got a grant after wait
	// (the daemon's monotonic clock, from reading its ask to sending the
	// grant), with turns slices handed out in between (0: the first slice after
	// its ask, or its group's running grant, served it).
	Wait func(gpu proto.UUID, group string, wait time.Duration, turns uint64)
	// Held: group handed gpu back (or lost it at the grace's end) after
	// holding it for held since its grant: the time the policy charges it, a
	// late hand-over included.
	Held func(gpu proto.UUID, group string, held time.Duration)
}

// DefaultConfig returns the defaults for this environment.
func DefaultConfig(getenv func(string) string) Config {
	return Config{
		Socket:       nodestatus.SocketPath(getenv),
		RunDir:       paths.RunDir(getenv),
		Policy:       policy.DefaultConfig(),
		StatusEvery:  250 * time.Millisecond,
		HelloTimeout: 5 * time.Second,
		MaxGPUs:      64,
		ProcRoot:     "/proc",
		Elastic:      elastic.DefaultConfig(),
		// A thread each (Go allows 10,000): far more than one node's GPU
		// processes (each holds one, briefly two), far fewer than a flood.
		MaxConns:          4096,
		MaxConnsPerUID:    1024,
		MaxConnsPerGroup:  1024,
		ContextProbeRetry: 30 * time.Second,
	}
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Socket == "":
		return fmt.Errorf("no socket path")
	case c.RunDir == "":
		return fmt.Errorf("no run directory")
	case c.StatusEvery <= 0 || c.HelloTimeout <= 0 || c.MaxGPUs <= 0:
		return fmt.Errorf("status interval, hello timeout and GPU limit must be positive")
	case c.MaxConns <= 0 || c.MaxConnsPerUID <= 0 || c.MaxConnsPerGroup <= 0:
		return fmt.Errorf("connection bounds must be positive")
	case c.ContextProbe != nil && c.ContextProbeRetry <= 0:
		return fmt.Errorf("context probe retry must be positive")
	case c.ListGPUs == nil:
		return fmt.Errorf("no GPU lister (the daemon schedules only the node's GPUs)")
	case c.IdleExit < 0:
		return fmt.Errorf("idle exit must not be negative")
	case c.Elastic.Hold <= 0 || c.Elastic.ReclaimWait < 0:
		return fmt.Errorf("elastic hold must be positive and reclaim wait not negative")
	}
	if err := c.Policy.Validate(); err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	return nil
}
