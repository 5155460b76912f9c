// Package groupmgr is the one way a group is made, changed and removed on a
// node: `gpuslice run`, `gpuslice group set|rm`, the node agent's device
// plugin and reconciler, and the DRA driver all go through a Manager. Like
// opencontainers/cgroups' Manager.Set(*Resources), one typed value (Resources)
// is applied by one code path: the settings are written into the group tree
// (internal/group), numbered (group.Tree.Bump), and the call returns once the
// time-slice daemon, the only process that writes limits into a group's state
// file, has applied that generation (it writes group.FileApplied), or fails
// after Config.Timeout with ErrNotApplied.
//
// Our own: the group tree and the daemon are gpuslice's; cgroups' Manager has
// the shape, not the resources.
package groupmgr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/identity"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/paths"
)

// DefaultTimeout is how long a change waits for the time-slice daemon by default.
const DefaultTimeout = 10 * time.Second

// ErrNotApplied is wrapped when the time-slice daemon did not apply a change
// in time (none runs, or it is stuck); the settings are written and a daemon
// applies them when it (re)starts.
var ErrNotApplied = errors.New("the time-slice daemon did not apply the group's settings")

// ErrBusy is wrapped when a group to remove still has live members.
var ErrBusy = errors.New("group in use")

// Resources is everything a group is set to: its settings (memory.max and
// memory.min, memory.spill, share or slice, share.max, priority; zero values
// are the defaults) and its GPUs.
type Resources struct {
	group.Settings
	// GPUs are the UUIDs of the whole GPUs the group holds (FileGPUs): the
	// node agent hot-adds and removes a running container's GPUs by setting
	// its group's, and gives the container the device nodes of those. nil
	// leaves the group's GPUs as they are (a caller that does not manage
	// them); empty: none.
	GPUs []string
}

// validate checks r and returns it with its GPUs sorted.
func (r Resources) validate() (Resources, error) {
	if err := r.Validate(); err != nil {
		return r, err
	}
	if r.GPUs != nil {
		gpus, err := normalGPUs(r.GPUs)
		if err != nil {
			return r, err
		}
		r.GPUs = gpus
	}
	return r, nil
}

// put writes r into the group's files: its settings, and its GPUs unless nil.
func (m *Manager) put(name string, r Resources) error {
	if err := m.tree.Put(name, r.Settings); err != nil {
		return err
	}
	if r.GPUs == nil {
		return nil
	}
	return m.tree.WriteFile(name, FileGPUs, formatGPUs(r.GPUs))
}

// Config says where the groups live.
type Config struct {
	RunDir string
	// ProcRoot is the host's /proc (the node agent's --proc-root; "" = /proc):
	// a container's group state names the pid namespace of ProcRoot/self.
	ProcRoot string
	// Timeout bounds each wait for the daemon (0: DefaultTimeout).
	Timeout time.Duration
}

// Manager makes, changes and removes groups of one run directory.
type Manager struct {
	cfg  Config
	tree group.Tree
}

// New returns the manager of cfg.RunDir's groups.
func New(cfg Config) *Manager {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Manager{cfg: cfg, tree: group.NewTree(cfg.RunDir)}
}

// Tree is the group tree the manager writes.
func (m *Manager) Tree() group.Tree { return m.tree }

// CreateOptions say how a group's state file is made.
type CreateOptions struct {
	// Container: the group is a container's (node agent, DRA driver): its
	// state file (mode 0666, reached through the group's directory) names the
	// pid namespace of ProcRoot as the host's, so members in other pid
	// namespaces get their host pids from the daemon. Else the group is a
	// run's (mode 0600, this user's processes).
	Container bool
	// Adopt (a run's named group): a state file that live members still map
	// after the run directory was replaced is taken back, not made anew.
	Adopt bool
	// GateOff: the group's launches are ungated (MPS clients), said in its
	// directory (group.FileGateOff).
	GateOff bool
	// NoWait returns once the settings are written, without waiting for the
	// daemon (the caller knows none runs: one applies them when it starts).
	NoWait bool
}

// Create makes group name (or takes the existing one) with its state file and
// the settings r, and waits until the daemon has applied them. Invalid
// settings wrap group.ErrInvalid, and nothing is written then.
func (m *Manager) Create(ctx context.Context, name string, r Resources, o CreateOptions) error {
	if err := paths.ValidateGroup(name); err != nil {
		return fmt.Errorf("%w: %w", group.ErrInvalid, err)
	}
	r, err := r.validate()
	if err != nil {
		return err
	}
	if err := m.put(name, r); err != nil {
		return err
	}
	if err := m.createState(name, o); err != nil {
		return err
	}
	if o.GateOff {
		if err := m.tree.WriteFile(name, group.FileGateOff, "off\n"); err != nil {
			return err
		}
	}
	return m.apply(ctx, name, o.NoWait)
}

// createState makes the group's state file as o says.
func (m *Manager) createState(name string, o CreateOptions) error {
	if o.Container {
		if err := groupstate.Create(m.cfg.ProcRoot, groupstate.Path(m.cfg.RunDir, name), name); err != nil {
			return fmt.Errorf("group %s: %w", name, err)
		}
		return nil
	}
	return createRunState(m.cfg.RunDir, name, o.Adopt)
}

// createRunState makes a run's group state file (mode 0600: its members are
// this user's processes) before any member starts, without a limit: the
// time-slice daemon writes the group's limit into it when it applies the
// group's settings. With adopt (a named group), a state its live members
// still use after the run directory was replaced is taken back, not made anew
// (a run's own group, run-<pid>, has no members before the run: the
// surviving children of an earlier run with that pid are not its own).
func createRunState(runDir, name string, adopt bool) error {
	path := groupstate.Path(runDir, name)
	if adopt {
		if err := identity.AdoptOrphanedState("/proc", path); err != nil { // one group, one state
			return fmt.Errorf("group %s: %w", name, err)
		}
	}
	if err := groupstate.CreateMode("/proc", path, name, 0o600); err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	return nil
}

// Set changes an existing group's settings (and GPUs, unless r.GPUs is nil)
// to r and waits until the daemon has applied them (not when only the GPUs
// changed: the daemon applies nothing for them). Invalid settings wrap
// group.ErrInvalid (nothing written).
func (m *Manager) Set(ctx context.Context, name string, r Resources) error {
	if err := paths.ValidateGroup(name); err != nil {
		return fmt.Errorf("%w: %w", group.ErrInvalid, err)
	}
	if !m.tree.Exists(name) {
		return fmt.Errorf("group %s: %w", name, fs.ErrNotExist)
	}
	r, err := r.validate()
	if err != nil {
		return err
	}
	// Only the GPUs changed (hot add or remove): the settings files are left
	// as they are and the daemon has nothing to apply (it keeps no GPUs), so
	// the generation is numbered, not waited for.
	if cur, err := m.tree.Read(name); err == nil && cur == r.Settings && r.GPUs != nil {
		if err := m.tree.WriteFile(name, FileGPUs, formatGPUs(r.GPUs)); err != nil {
			return err
		}
		return m.apply(ctx, name, true)
	}
	if err := m.put(name, r); err != nil {
		return err
	}
	return m.apply(ctx, name, false)
}

// Change applies setting changes ("slice=20ms") to a group, creating its
// directory (without a state file) if missing, and waits for the daemon
// unless noWait. It returns the new settings.
func (m *Manager) Change(ctx context.Context, name string, changes []group.Change, noWait bool) (group.Settings, error) {
	s, err := m.tree.Set(name, changes)
	if err != nil {
		return s, err
	}
	return s, m.apply(ctx, name, noWait)
}

// Get returns a group's resources as its files say (GPUs nil: the group's
// GPUs were never set).
func (m *Manager) Get(name string) (Resources, error) {
	s, err := m.tree.Read(name)
	if err != nil {
		return Resources{Settings: s}, err
	}
	gpus, err := m.readGPUs(name)
	return Resources{Settings: s, GPUs: gpus}, err
}

// List returns the names of the node's groups, sorted.
func (m *Manager) List() ([]string, error) { return m.tree.List() }

// Remove deletes a group no process uses (live members would start a second
// state, and a second limit, for it): ErrBusy otherwise. A missing group is
// no error.
func (m *Manager) Remove(_ context.Context, name string) error {
	if err := paths.ValidateGroup(name); err != nil {
		return fmt.Errorf("%w: %w", group.ErrInvalid, err)
	}
	if !m.tree.Exists(name) {
		return nil
	}
	n, err := identity.LiveMembers(m.cfg.ProcRoot, groupstate.Path(m.cfg.RunDir, name))
	if err != nil {
		return fmt.Errorf("group %s: %w", name, err)
	}
	if n > 0 {
		return fmt.Errorf("group %s: %w: %d process(es) of the group are running", name, ErrBusy, n)
	}
	return m.tree.Remove(name)
}

// apply numbers the settings written and waits for the daemon to apply them.
func (m *Manager) apply(ctx context.Context, name string, noWait bool) error {
	gen, err := m.tree.Bump(name)
	if err != nil || noWait {
		return err
	}
	return m.wait(ctx, name, gen)
}

// wait polls the group's applied generation until it reaches gen. A running
// daemon of a release before generations (a node being upgraded) applies the
// settings without acknowledging them: not waited for.
func (m *Manager) wait(ctx context.Context, name string, gen uint64) error {
	if m.olderDaemon() {
		klog.FromContext(ctx).Info("the running time-slice daemon predates settings generations: "+
			"settings written, not waited for", "group", name, "runDir", m.cfg.RunDir)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
	defer cancel()
	pause := 200 * time.Microsecond
	for {
		if got, err := m.tree.Applied(name); err == nil && got >= gen {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s: %w (generation %d) within %v: is the time-slice daemon of %s running "+
				"(gpuslice node, or gpuslice-node's)? The settings are written and applied when it starts: %w",
				name, ErrNotApplied, gen, m.cfg.Timeout, m.cfg.RunDir, context.Cause(ctx))
		case <-time.After(pause):
			pause = min(2*pause, time.Millisecond)
		}
	}
}

// olderDaemon reports whether the run directory's status names a live daemon
// that does not acknowledge generations.
func (m *Manager) olderDaemon() bool {
	st, err := nodestatus.Read(m.cfg.RunDir)
	if err != nil || st.PID <= 0 || slices.Contains(st.Features, nodestatus.FeatureGenerations) {
		return false
	}
	return unix.Kill(st.PID, 0) == nil
}
