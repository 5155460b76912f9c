package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
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

// PrepareRun validates the time-slice flags, makes sure a time-slice daemon is
// running (starting one if needed; concurrent runs end up with one), and makes
// the group with its settings through the groups manager, which returns once
// the daemon has applied them (the group's limit is in its state file before
// the command starts). It returns the environment entries the command needs.
// Flag errors wrap group.ErrInvalid (a usage error: exit 2). Without a daemon
// (none can be started, or NoDaemon and none runs) the settings are written
// for the next daemon, and the error wraps ErrNoDaemon; a run with a memory
// limit then fails with a plain error instead (only the daemon writes limits:
// its command would run unlimited).
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
	m := groupmgr.New(groupmgr.Config{RunDir: runDir})
	st, err := settingsAfter(m.Tree(), s.Group, changes)
	if err != nil {
		return nil, err
	}
	socket, start := s.daemon(getenv)
	env := []string{timeslice.EnvSocket + "=" + socket}
	var noDaemon error
	switch {
	case s.NoDaemon && !client.Reachable(ctx, socket):
		noDaemon = fmt.Errorf("%w: none answers at %s (--no-daemon)", ErrNoDaemon, socket)
	case !s.NoDaemon:
		if err := client.EnsureRunning(ctx, socket, start); err != nil {
			noDaemon = fmt.Errorf("%w: %w", ErrNoDaemon, err)
		}
	}
	o := groupmgr.CreateOptions{Adopt: !s.Private, NoWait: noDaemon != nil}
	if err := m.Create(ctx, s.Group, groupmgr.Resources{Settings: st}, o); err != nil {
		return nil, err
	}
	if noDaemon != nil && (st.MemoryMax != 0 || st.MemoryMin != 0) {
		return nil, fmt.Errorf("group %s has a memory limit, which only the time-slice daemon writes into the "+
			"group's state (%v): run without --no-daemon, or start one (gpuslice node)", s.Group, noDaemon)
	}
	return env, noDaemon
}

// settingsAfter is the group's settings (the defaults for a new group) with
// changes applied; an invalid change wraps group.ErrInvalid.
func settingsAfter(tree group.Tree, name string, changes []group.Change) (group.Settings, error) {
	var st group.Settings
	if tree.Exists(name) {
		var err error
		if st, err = tree.Read(name); err != nil {
			return st, err
		}
	}
	for _, c := range changes {
		if err := st.Apply(c.File, c.Value); err != nil {
			return st, err
		}
	}
	return st, nil
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
