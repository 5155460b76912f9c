// Package cli implements the gpuslice command line: a table of subcommands,
// each in its own file, parsed with the standard flag package.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

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

// Command is one subcommand.
type Command struct {
	Name    string
	Summary string
	Run     func(ctx context.Context, env *Env, args []string) error
}

// UsageError marks an error caused by the caller's input (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usagef builds a UsageError.
func usagef(format string, a ...any) error { return &UsageError{Err: fmt.Errorf(format, a...)} }

// ExitError carries a child's exit status through unchanged.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

func commands() []Command {
	cmds := []Command{
		runCommand(),
		demoCommand(),
		versionCommand(),
		smiCommand(),
	}
	cmds = append(cmds, extraCommands()...)
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	return cmds
}

// Main runs gpuslice with args (without the program name) and returns the exit code.
func Main(ctx context.Context, args []string, env *Env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(env.Stdout)
		if len(args) == 0 {
			return ExitUsage
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = []string{"version"}
	}
	for _, c := range commands() {
		if c.Name == args[0] {
			return exitCode(env, c.Run(ctx, env, args[1:]))
		}
	}
	fmt.Fprintf(env.Stderr, "gpuslice: unknown command %q (see 'gpuslice help')\n", args[0])
	return ExitUsage
}

func exitCode(env *Env, err error) int {
	var exit *ExitError
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
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

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "gpuslice: share GPUs safely between processes and containers.")
	fmt.Fprintln(w, "\nUsage: gpuslice <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun 'gpuslice <command> -h' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(env *Env, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(env.Stderr, "Usage: gpuslice %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into UsageErrors (exit 2).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{Err: fmt.Errorf("%s: %w", fs.Name(), err)}
	}
	return nil
}

func versionCommand() Command {
	return Command{Name: "version", Summary: "print the version", Run: func(_ context.Context, env *Env, args []string) error {
		fs := newFlagSet(env, "version", "")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, version.String("gpuslice"))
		return nil
	}}
}
