package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// testEnv is an Env with captured output and only the given variables set.
func testEnv(t *testing.T, vars ...string) (*Env, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errOut bytes.Buffer
	m := map[string]string{"GPUSLICE_RUN_DIR": t.TempDir(), "GPUSLICE_SOCKET": t.TempDir() + "/none.sock"}
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	env := &Env{Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(""), BinDir: t.TempDir(),
		Getenv: func(k string) string { return m[k] }}
	return env, &out, &errOut
}

func TestMainExitCodesAndMessages(t *testing.T) {
	cases := []struct {
		args       []string
		code       int
		out, error string // substrings of stdout and stderr
	}{
		{nil, 2, "Available Commands:", ""},
		{[]string{"help"}, 0, "Available Commands:", ""},
		{[]string{"--help"}, 0, "Available Commands:", ""},
		{[]string{"-h"}, 0, "Available Commands:", ""},
		{[]string{"-help"}, 0, "Available Commands:", ""},
		{[]string{"bogus"}, 2, "", `gpuslice: unknown command "bogus" (see 'gpuslice help')`},
		{[]string{"--bogus"}, 2, "", "gpuslice: gpuslice: unknown flag: --bogus"},
		{[]string{"version"}, 0, "gpuslice ", ""},
		{[]string{"--version"}, 0, "gpuslice ", ""},
		{[]string{"-version"}, 0, "gpuslice ", ""},
		{[]string{"version", "x"}, 2, "", "gpuslice: version: unknown command"},
		{[]string{"run"}, 2, "", "gpuslice: run: no command given"},
		{[]string{"run", "--nope", "--", "true"}, 2, "", "gpuslice: run: unknown flag: --nope"},
		{[]string{"run", "--memory", "6XB", "--", "true"}, 2, "", "gpuslice: --memory:"},
		{[]string{"run", "-memory", "0", "--", "true"}, 2, "", "gpuslice: --memory must be larger than 0"},
		{[]string{"run", "--group", "Bad/Name", "--", "true"}, 2, "", "gpuslice: --group:"},
		{[]string{"run", "--help"}, 0, "CMD's own arguments are passed through untouched", ""},
		{[]string{"demo", "--tasks", "0"}, 2, "", "gpuslice: demo: --tasks"},
		{[]string{"demo", "extra"}, 2, "", "gpuslice: demo: unknown command"},
		{[]string{"node", "--driver", "bogus"}, 2, "", "gpuslice: node: --driver:"},
		{[]string{"node", "--period", "soon"}, 2, "", "gpuslice: node: invalid argument"},
		{[]string{"smi", "--driver", "bogus"}, 2, "", "gpuslice: --driver:"},
		{[]string{"status"}, 1, "", "gpuslice: no node daemon answers on"},
		{[]string{"status", "--help"}, 0, "--run-dir", ""},
		{[]string{"group"}, 2, "", "gpuslice: group: want set, get, ls or rm"},
		{[]string{"group", "bogus"}, 2, "", `gpuslice: group: bad arguments ["bogus"]`},
		{[]string{"group", "get"}, 2, "", "gpuslice: group get: requires at least 1 arg(s)"},
		{[]string{"group", "set", "train"}, 2, "", "gpuslice: group set: requires at least 2 arg(s)"},
		{[]string{"group", "rm"}, 2, "", "gpuslice: group rm: accepts 1 arg(s)"},
		{[]string{"group", "ls", "x"}, 2, "", "gpuslice: group ls: unknown command"},
		{[]string{"group", "get", "nosuch"}, 2, "", `gpuslice: group get: no group "nosuch"`},
		{[]string{"group", "get", "Bad/Name"}, 2, "", "gpuslice: group get:"},
		{[]string{"group", "rm", "nosuch"}, 2, "", `gpuslice: group rm: no group "nosuch"`},
		{[]string{"group", "set", "train", "slice=soon"}, 2, "", "(nothing changed)"},
		{[]string{"group", "set", "train", "nonsense"}, 2, "", "gpuslice: group set:"},
		{[]string{"group", "set", "train", "share.max=0.5%"}, 2, "", "share ceiling \"0.5%\" below 1% (nothing changed)"},
		{[]string{"group", "set", "train", "share.max=40%"}, 0, "share.max 40%", ""},
		{[]string{"run", "--share-max", "200%", "--", "true"}, 2, "", "gpuslice: --share-max: invalid setting: share.max:"},
		{[]string{"group", "--help"}, 0, "Settings: memory.max", ""},
		{[]string{"completion", "bash"}, 0, "bash completion", ""},
		{[]string{"completion", "zsh"}, 0, "compdef", ""},
		{[]string{"completion", "fish"}, 0, "complete -c gpuslice", ""},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			env, out, errOut := testEnv(t)
			code := Main(context.Background(), c.args, env)
			if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errOut.String(), c.error) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					code, out.String(), errOut.String(), c.code, c.out, c.error)
			}
		})
	}
}

// TestRunPassesArguments checks that run's flags end at the command (or at
// --) and that the command's own arguments arrive untouched.
func TestRunPassesArguments(t *testing.T) {
	cases := []struct {
		args    []string
		command []string
		memory  string
		slice   string
	}{
		{[]string{"run", "--", "app", "--memory", "1", "-v"}, []string{"app", "--memory", "1", "-v"}, "", ""},
		{[]string{"run", "--memory", "1Gi", "app", "--help"}, []string{"app", "--help"}, "1Gi", ""},
		{[]string{"run", "--memory=2Gi", "--slice", "5ms", "--", "app", "--", "x"}, []string{"app", "--", "x"}, "2Gi", "5ms"},
		{[]string{"run", "-memory", "3G", "-slice=1ms", "app", "-memory", "4G"}, []string{"app", "-memory", "4G"}, "3G", "1ms"},
		{[]string{"run", "sh", "-c", "exit 7"}, []string{"sh", "-c", "exit 7"}, "", ""},
		{[]string{"run", "--no-daemon", "app", "-h"}, []string{"app", "-h"}, "", ""},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			env, _, errOut := testEnv(t)
			var got []string
			var flags runFlags
			record := func(_ context.Context, _ *Env, f *runFlags, command []string) error {
				got, flags = command, *f
				return nil
			}
			root := newRoot(env, []*cobra.Command{runCommand(env, record)})
			if code := execute(context.Background(), env, root, c.args); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if !slices.Equal(got, c.command) || flags.memory != c.memory || flags.slices.Slice != c.slice {
				t.Errorf("command %q memory %q slice %q; want %q %q %q", got, flags.memory, flags.slices.Slice, c.command, c.memory, c.slice)
			}
		})
	}
}

func TestRunPassesExitCode(t *testing.T) {
	env, _, errOut := testEnv(t)
	fail := func(context.Context, *Env, *runFlags, []string) error { return &ExitError{Code: 7} }
	root := newRoot(env, []*cobra.Command{runCommand(env, fail)})
	if code := execute(context.Background(), env, root, []string{"run", "--", "app"}); code != 7 || errOut.Len() != 0 {
		t.Fatalf("exit %d, stderr %q; want the command's 7 and nothing said", code, errOut)
	}
}

func TestLegacyDashes(t *testing.T) {
	env, _, _ := testEnv(t)
	root := NewRootCommand(env)
	cases := []struct{ in, want []string }{
		{[]string{"-version"}, []string{"--version"}},
		{[]string{"run", "-memory", "1G", "-group=g", "--", "-memory"}, []string{"run", "--memory", "1G", "--group=g", "--", "-memory"}},
		{[]string{"run", "-no-daemon", "app", "-memory", "1G"}, []string{"run", "--no-daemon", "app", "-memory", "1G"}},
		{[]string{"run", "-gpu", "app", "-x"}, []string{"run", "--gpu", "app", "-x"}},
		{[]string{"node", "-v", "3", "-idle-exit", "1s", "-if-not-running"}, []string{"node", "-v", "3", "--idle-exit", "1s", "--if-not-running"}},
		{[]string{"group", "-run-dir", "/r", "set", "g", "slice=1ms"}, []string{"group", "--run-dir", "/r", "set", "g", "slice=1ms"}},
		{[]string{"group", "get", "-run-dir=/r", "g"}, []string{"group", "get", "--run-dir=/r", "g"}},
		{[]string{"status", "-help"}, []string{"status", "--help"}},
		{[]string{"smi", "-nope"}, []string{"smi", "-nope"}},
	}
	for _, c := range cases {
		if got := legacyDashes(root, c.in); !slices.Equal(got, c.want) {
			t.Errorf("legacyDashes(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	env, _, _ := testEnv(t)
	visit(NewRootCommand(env), func(c *cobra.Command) {
		if c.Short == "" {
			t.Errorf("%s: no summary", c.CommandPath())
		}
		args := []string{"--help"}
		if c.HasParent() {
			args = append(strings.Split(commandName(c), " "), "--help")
		}
		e, out, errOut := testEnv(t)
		if code := Main(context.Background(), args, e); code != 0 || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	})
}

// A run inside a group (its environment names the group's file: a run inside
// a run, a container's process) runs its command in that group, under its
// limits; flags that would give it a group of its own, out of those limits
// (it had one: a nested run without --memory had no limit at all), are
// refused.
func TestRunInsideGroup(t *testing.T) {
	const file, lib = "/run/outer/groups/outer/" + groupstate.FileName, "/opt/gs/libgpuslice.so"
	t.Setenv("GPUSLICE_GROUP_FILE", file)
	t.Setenv("GPUSLICE_GROUP", "outer")
	t.Setenv("LD_PRELOAD", lib)
	for _, c := range []struct {
		args      []string
		code      int
		out, errs string
	}{
		{[]string{"run", "--", "sh", "-c", "echo $GPUSLICE_GROUP_FILE; exit 3"}, 3, file + "\n", ""},
		{[]string{"run", "--group", "outer", "--", "sh", "-c", "echo $GPUSLICE_GROUP"}, 0, "outer\n", ""},
		{[]string{"run", "--memory", "1Gi", "--", "true"}, 2, "", "already in group outer"},
		{[]string{"run", "--group", "other", "--", "true"}, 2, "", "already in group outer"},
		{[]string{"run", "--share", "90%", "--", "true"}, 2, "", "already in group outer"},
	} {
		env, out, errOut := testEnv(t, "GPUSLICE_GROUP_FILE="+file, "GPUSLICE_GROUP=outer", "LD_PRELOAD="+lib)
		code := Main(context.Background(), c.args, env)
		if code != c.code || out.String() != c.out || !strings.Contains(errOut.String(), c.errs) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
				c.args, code, out, errOut, c.code, c.out, c.errs)
		}
	}
	// The variable alone (left set by hand, no library preloaded) is no group.
	env, _, errOut := testEnv(t, "GPUSLICE_GROUP_FILE="+file)
	if Main(context.Background(), []string{"run", "--memory", "1Gi", "--", "true"}, env); strings.Contains(errOut.String(), "already in group") {
		t.Errorf("GPUSLICE_GROUP_FILE without the library taken for a group: %q", errOut)
	}
}
