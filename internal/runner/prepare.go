package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpuslice/gpuslice/internal/gpurequest"
	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/paths"
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

// Request is the run's request: its time-slice flags, --memory on each GPU
// and elastic memory. Flag errors wrap group.ErrInvalid and name the flag.
func (s RunSetup) Request() (gpurequest.Request, error) {
	f, err := s.Flags.Settings()
	if err != nil {
		return gpurequest.Request{}, err
	}
	r := gpurequest.Request{Share: f.Share, Slice: f.Slice, ShareMax: f.ShareMax, Priority: f.Priority.String(),
		MemoryCeiling: s.Elastic.Max, Spill: s.Elastic.Spill}
	if s.MemoryMax != 0 {
		r.GPUs = []gpurequest.GPU{{Memory: s.MemoryMax}}
	}
	return r, nil
}

// Settings are the run's settings on a new group: its request translated by gpurequest.
func (s RunSetup) Settings() (group.Settings, error) {
	r, err := s.Request()
	if err != nil {
		return group.Settings{}, err
	}
	return r.Settings()
}

// changes are the setting files the run's flags set (the others keep a named
// group's values), holding its Settings; the memory files only with --memory
// (a plain limit resets an elastic guarantee).
func (s RunSetup) changes() ([]group.Change, error) {
	st, err := s.Settings()
	if err != nil {
		return nil, err
	}
	given, err := s.Flags.Changes()
	if err != nil {
		return nil, err
	}
	files := make([]string, 0, len(given)+4)
	for _, c := range given {
		files = append(files, c.File)
	}
	if s.MemoryMax != 0 {
		files = append(files, group.FileMemoryMax, group.FileMemoryMin, group.FileMemorySpill)
	}
	var out []group.Change
	if s.MemoryMax != 0 { // no guarantee above the limit while it is set
		out = append(out, group.Change{File: group.FileMemoryMin, Value: "0"})
	}
	for _, f := range files {
		v, err := st.Format(f)
		if err != nil {
			return nil, err
		}
		out = append(out, group.Change{File: f, Value: v})
	}
	return out, nil
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
	changes, err := s.changes()
	if err != nil {
		return nil, err
	}
	if err := paths.ValidateGroup(s.Group); err != nil {
		return nil, fmt.Errorf("%w: %w", group.ErrInvalid, err)
	}
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
	env := []string{nodestatus.EnvSocket + "=" + socket}
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
	return nodestatus.SocketPath(getenv), o
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
