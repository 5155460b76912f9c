// Package cli implements the gpuslice command line: one list of cobra
// subcommands (commands), each in its own file, with flags parsed by pflag.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gpuslice/gpuslice/internal/version"
)

// ExitUsage is the exit code for bad flags, unparseable values and refused requests.
const ExitUsage = 2

// Env is what a command may touch of the outside world; tests build their own.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	Getenv         func(string) string
	// BinDir is the directory holding gpuslice's build outputs (libgpuslice.so, sim/, apps).
	BinDir string
}

// DefaultEnv is the process environment, with BinDir next to the running executable.
func DefaultEnv() (*Env, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate gpuslice executable: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return &Env{Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin, Getenv: os.Getenv, BinDir: filepath.Dir(exe)}, nil
}

// UsageError marks an error caused by the caller's input (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usagef builds a UsageError.
func usagef(format string, a ...any) error { return &UsageError{Err: fmt.Errorf(format, a...)} }

// ExitError carries a child's exit status through unchanged (nothing is printed).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// commands is gpuslice's one list of subcommands (cobra adds help and completion).
func commands(env *Env) []*cobra.Command {
	return []*cobra.Command{
		runCommand(env, runRun),
		demoCommand(env),
		nodeCommand(env),
		groupCommand(env),
		statusCommand(env),
		smiCommand(env),
		versionCommand(env),
	}
}

// NewRootCommand returns the gpuslice command with every subcommand.
func NewRootCommand(env *Env) *cobra.Command { return newRoot(env, commands(env)) }

func newRoot(env *Env, cmds []*cobra.Command) *cobra.Command {
	var showVersion bool
	root := &cobra.Command{
		Use:           "gpuslice <command> [flags]",
		Short:         "gpuslice: share GPUs safely between processes and containers.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case showVersion:
				fmt.Fprintln(env.Stdout, version.String("gpuslice"))
				return nil
			case len(args) == 0:
				if err := cmd.Help(); err != nil {
					return err
				}
				return &ExitError{Code: ExitUsage}
			}
			return usagef("unknown command %q (see 'gpuslice help')", args[0])
		},
	}
	root.Flags().BoolVar(&showVersion, "version", false, "print the version")
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.SetIn(env.Stdin)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &UsageError{Err: fmt.Errorf("%s: %w", commandName(c), err)}
	})
	root.AddCommand(cmds...)
	// Use lines spell out their flags where they matter.
	visit(root, func(c *cobra.Command) { c.DisableFlagsInUseLine = true })
	return root
}

// Main runs gpuslice with args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, env *Env) int {
	return execute(ctx, env, NewRootCommand(env), args)
}

func execute(ctx context.Context, env *Env, root *cobra.Command, args []string) int {
	root.SetArgs(legacyDashes(root, args))
	return exitCode(env, root.ExecuteContext(ctx))
}

func exitCode(env *Env, err error) int {
	var exit *ExitError
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	case errors.As(err, &usage):
		fmt.Fprintf(env.Stderr, "gpuslice: %v\n", err)
		return ExitUsage
	default:
		fmt.Fprintf(env.Stderr, "gpuslice: %v\n", err)
		return 1
	}
}

// usageArgs wraps a cobra argument check so that its error is a usage error
// naming the command, after the command's usage on stderr.
func usageArgs(env *Env, check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			fmt.Fprint(env.Stderr, cmd.UsageString())
			return &UsageError{Err: fmt.Errorf("%s: %w", commandName(cmd), err)}
		}
		return nil
	}
}

// visit calls f on cmd and every command under it.
func visit(cmd *cobra.Command, f func(*cobra.Command)) {
	f(cmd)
	for _, c := range cmd.Commands() {
		visit(c, f)
	}
}

// commandName is the command's path without the program name ("group set").
func commandName(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return cmd.Name()
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// noArgs is cobra.NoArgs as a usage error.
func noArgs(env *Env) cobra.PositionalArgs { return usageArgs(env, cobra.NoArgs) }

// driverFlag registers --driver (default $GPUSLICE_DRIVER) on fs.
func driverFlag(env *Env, fs *pflag.FlagSet, usage string) *string {
	return fs.String("driver", env.Getenv("GPUSLICE_DRIVER"), usage)
}

func versionCommand(env *Env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Args:  noArgs(env),
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(env.Stdout, version.String("gpuslice"))
			return nil
		},
	}
}
