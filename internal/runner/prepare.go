package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/timeslice"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

// ErrNoDaemon wraps a failure to reach or start the time-slice daemon; a run can go
// on without one (the library then runs ungated and says so once).
var ErrNoDaemon = errors.New("node daemon unavailable")

// RunSetup is what `gpuslice run` asks of the time-slice side.
type RunSetup struct {
	Group     string              // the run's group (a --group NAME, or run-<pid>)
	Private   bool                // Group is the run's own (run-<pid>): its state is made afresh, never taken over
	Flags     group.RunFlags      // --slice, --share, --share-max, --priority
	MemoryMax uint64              // --memory in bytes, recorded as memory.max (0: leave as is)
	Elastic   ElasticSetup        // --memory-max, --spill (MemoryMax is then the guarantee)
	NoDaemon  bool                // do not start a daemon if none runs
	Start     client.StartOptions // how to start one (default: this executable)
}

// ElasticSetup is elastic memory for a run: a ceiling past the guarantee.
type ElasticSetup struct {
	Max   uint64 // 0: no elastic memory
	Spill bool
}

// memoryChanges are the memory settings of a run.
func (s RunSetup) memoryChanges() []group.Change {
	if s.MemoryMax == 0 {
		return nil
	}
	spill := "none"
	if s.Elastic.Spill {
		spill = "host"
	}
	if s.Elastic.Max == 0 { // a plain limit
		return []group.Change{{File: group.FileMemoryMin, Value: "0"}, {File: group.FileMemorySpill, Value: "none"},
			{File: group.FileMemoryMax, Value: strconv.FormatUint(s.MemoryMax, 10)}}
	}
	return []group.Change{{File: group.FileMemoryMin, Value: "0"},
		{File: group.FileMemoryMax, Value: strconv.FormatUint(s.Elastic.Max, 10)},
		{File: group.FileMemoryMin, Value: strconv.FormatUint(s.MemoryMax, 10)},
		{File: group.FileMemorySpill, Value: spill}}
}

// PrepareRun validates the time-slice flags, writes the group's settings to
// the group tree, and makes sure a time-slice daemon is running (starting one if
// needed; concurrent runs end up with one). It returns the environment entries
// the command needs. Flag errors wrap group.ErrInvalid (a usage error: exit 2);
// a daemon that cannot be started gives ErrNoDaemon after the settings are written.
func PrepareRun(ctx context.Context, getenv func(string) string, s RunSetup) ([]string, error) {
	changes, err := s.Flags.Changes()
	if err != nil {
		return nil, err
	}
	if err := paths.ValidateGroup(s.Group); err != nil {
		return nil, fmt.Errorf("%w: %w", group.ErrInvalid, err)
	}
	changes = append(changes, s.memoryChanges()...)
	runDir := paths.RunDir(getenv)
	if err := paths.CheckRunDir(runDir); err != nil {
		return nil, err
	}
	tree := group.NewTree(runDir)
	st, err := tree.Set(s.Group, changes)
	if err != nil {
		return nil, err
	}
	if err := timeslice.PrepareGroupState(runDir, s.Group, st, !s.Private); err != nil {
		return nil, err
	}
	socket, start := s.daemon(getenv)
	env := []string{timeslice.EnvSocket + "=" + socket}
	if s.NoDaemon {
		return env, nil
	}
	if err := client.EnsureRunning(ctx, socket, start); err != nil {
		return env, fmt.Errorf("%w: %w", ErrNoDaemon, err)
	}
	return env, nil
}

// daemon returns the socket of the run's daemon and how to start one.
func (s RunSetup) daemon(getenv func(string) string) (string, client.StartOptions) {
	o := s.Start
	o.Args = append([]string{"--run-dir", paths.RunDir(getenv)}, o.Args...)
	return timeslice.SocketPath(getenv), o
}

// SuperviseRun keeps the run's daemon running until ctx ends (Supervise); a
// no-op with NoDaemon.
func SuperviseRun(ctx context.Context, getenv func(string) string, s RunSetup) {
	if s.NoDaemon {
		return
	}
	socket, start := s.daemon(getenv)
	client.Supervise(ctx, socket, paths.RunDir(getenv), start)
}
