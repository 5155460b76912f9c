package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/internal/output"
	"github.com/gpuslice/gpuslice/internal/paths"
	"github.com/gpuslice/gpuslice/internal/timeslice/client"
)

func groupCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group set|get|ls|rm",
		Short: "show or change group settings: gpuslice group set|get|ls|rm",
		Long:  "Show or change group settings.\n\nUsage: gpuslice group " + groupUsage,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(env.Stderr, cmd.UsageString())
			if len(args) == 0 {
				return usagef("group: want set, get, ls or rm")
			}
			return usagef("group: bad arguments %q", args)
		},
	}
	runDir := cmd.PersistentFlags().String("run-dir", paths.RunDir(env.Getenv), "run directory (env GPUSLICE_RUN_DIR)")
	tree := func() group.Tree { return group.NewTree(*runDir) }
	cmd.AddCommand(&cobra.Command{
		Use:     "set NAME SETTING=VALUE...",
		Short:   "change a group's settings (creating it), e.g. set train slice=20ms priority=high memory.max=6GiB",
		Long:    "Change a group's settings (creating the group).\n\nUsage: gpuslice group " + groupUsage,
		Example: "  gpuslice group set train slice=20ms priority=high memory.max=6GiB",
		Args:    usageArgs(env, cobra.MinimumNArgs(2)),
		RunE: func(c *cobra.Command, a []string) error {
			return groupSet(c.Context(), env, groupsOf(env, *runDir), a[0], a[1:])
		},
	}, groupGetCommand(env, tree), groupListCommand(env, tree), &cobra.Command{
		Use:   "rm NAME",
		Short: "remove a group that no process uses",
		Args:  usageArgs(env, cobra.ExactArgs(1)),
		RunE: func(c *cobra.Command, a []string) error {
			return groupRemove(c.Context(), groupsOf(env, *runDir).m, a[0])
		},
	})
	return cmd
}

const groupUsage = `set NAME SETTING=VALUE...   e.g. set train slice=20ms priority=high memory.max=6GiB
       gpuslice group get NAME [FILE...]
       gpuslice group ls
       gpuslice group rm NAME

Settings: memory.max (bytes, a size such as 6GiB, or max; with memory.min, the ceiling), memory.min (the
guarantee: elastic memory past it is borrowed from the node daemon; 0: none), memory.spill (host or none), slice (e.g. 20ms, 200us, default),
share (e.g. 30%, default; replaces slice), share.max (a ceiling on the GPU time, even alone on the GPU,
e.g. 40%, or none), priority (high or low).
Read-back: memory.current, gpu_time.achieved, burst.banked.`

// groups is the groups manager of a run directory, and whether its time-slice
// daemon answers (a change then waits until it has applied it).
type groups struct {
	m      *groupmgr.Manager
	daemon bool
}

func groupsOf(env *Env, runDir string) groups {
	socket := env.Getenv(nodestatus.EnvSocket)
	if socket == "" {
		socket = filepath.Join(runDir, "node.sock")
	}
	return groups{m: groupmgr.New(groupmgr.Config{RunDir: runDir}), daemon: client.Reachable(context.Background(), socket)}
}

// groupRemove deletes a group that no process uses: removing the state file
// under live members would let the next member start a second state (and a
// second limit) for the same group.
func groupRemove(ctx context.Context, m *groupmgr.Manager, name string) error {
	if !m.Tree().Exists(name) {
		return usagef("group rm: no group %q", name)
	}
	if err := m.Remove(ctx, name); err != nil {
		if errors.Is(err, groupmgr.ErrBusy) {
			return fmt.Errorf("group rm %s: %w; stop them first", name, err)
		}
		return fmt.Errorf("group rm %s: %w", name, err)
	}
	return nil
}

// groupSet changes a group's settings; where its time-slice daemon runs, it
// returns once the daemon has applied them.
func groupSet(ctx context.Context, env *Env, g groups, name string, kvs []string) error {
	var changes []group.Change
	for _, kv := range kvs {
		c, err := group.ParseChange(kv)
		if err != nil {
			return usagef("group set: %w", err)
		}
		changes = append(changes, c)
	}
	s, err := g.m.Change(ctx, name, changes, !g.daemon)
	if errors.Is(err, group.ErrInvalid) {
		return usagef("group set %s: %w (nothing changed)", name, err)
	}
	if err != nil {
		return err
	}
	return printSettings(env, s)
}

func printSettings(env *Env, s group.Settings) error {
	for _, f := range group.SettingFiles() {
		v, err := s.Format(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "%s %s\n", f, v)
	}
	return nil
}

func groupGetCommand(env *Env, tree func() group.Tree) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "get NAME [FILE...] [-o json|yaml|wide]",
		Short: "print a group's settings and read-back files (or only FILEs)",
		Args:  usageArgs(env, cobra.MinimumNArgs(1)),
	}
	out := output.AddFlag(cmd.Flags())
	cmd.RunE = func(_ *cobra.Command, a []string) error { return groupGet(env, tree(), a[0], a[1:], *out) }
	return cmd
}

func groupListCommand(env *Env, tree func() group.Tree) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ls [-o json|yaml|wide]",
		Short: "list groups with their main settings and memory in use",
		Args:  noArgs(env),
	}
	out := output.AddFlag(cmd.Flags())
	cmd.RunE = func(*cobra.Command, []string) error { return groupList(env, tree(), *out) }
	return cmd
}

func groupGet(env *Env, tree group.Tree, name string, files []string, f output.Format) error {
	if err := paths.ValidateGroup(name); err != nil {
		return usagef("group get: %w", err)
	}
	if !tree.Exists(name) {
		return usagef("group get: no group %q", name)
	}
	if f != output.Table {
		if len(files) > 0 {
			return usagef("group get: FILE arguments print plain values; -o %s prints the whole group", f)
		}
		d, err := readGroup(tree, name)
		if err != nil {
			return err
		}
		return writeGroups(env.Stdout, []GroupDoc{d}, f, false)
	}
	if len(files) == 0 {
		s, err := tree.Read(name)
		if err != nil {
			return err
		}
		if err := printSettings(env, s); err != nil {
			return err
		}
		files = group.ReadbackFiles()
	}
	for _, f := range files {
		if strings.ContainsAny(f, "/\\") || strings.HasPrefix(f, ".") {
			return usagef("group get: bad file name %q", f)
		}
		v, err := tree.ReadFile(name, f)
		if errors.Is(err, os.ErrNotExist) {
			v = "-"
		} else if err != nil {
			return err
		}
		for _, line := range strings.Split(v, "\n") {
			fmt.Fprintf(env.Stdout, "%s %s\n", f, line)
		}
	}
	return nil
}

func groupList(env *Env, tree group.Tree, f output.Format) error {
	names, err := tree.List()
	if err != nil {
		return err
	}
	docs := make([]GroupDoc, 0, len(names))
	for _, n := range names {
		d, err := readGroup(tree, n)
		if err != nil {
			d.Error = err.Error()
		}
		docs = append(docs, d)
	}
	return writeGroups(env.Stdout, docs, f, true)
}
