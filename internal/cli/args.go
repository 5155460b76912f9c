package cli

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// stopsAtFirstArg marks commands whose flags end at their first argument:
// everything after it belongs to the program they run (gpuslice run).
const stopsAtFirstArg = "gpuslice.io/stops-at-first-arg"

// legacyDashes rewrites the single-dash long flags the standard flag package
// accepted (-memory 6Gi, -run-dir=DIR, -help, -version) into pflag's double
// dash, so that scripts written for earlier versions keep working. It stops
// at "--" and, for a command that stops at its first argument, there: the
// program's own arguments are never touched.
func legacyDashes(root *cobra.Command, args []string) []string {
	out := slices.Clone(args)
	cmd := root
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if sub := subcommand(cmd, a); sub != nil {
				cmd = sub
				continue
			}
			if cmd.Annotations[stopsAtFirstArg] != "" {
				break
			}
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		single := !strings.HasPrefix(a, "--")
		var f *pflag.Flag
		switch {
		case single && len(name) == 1:
			f = lookupFlag(cmd, func(fs *pflag.FlagSet) *pflag.Flag { return fs.ShorthandLookup(name) })
		default:
			f = lookupFlag(cmd, func(fs *pflag.FlagSet) *pflag.Flag { return fs.Lookup(name) })
			if single && (f != nil || name == "help" || name == "version") {
				out[i] = "-" + a
			}
		}
		if f != nil && !hasValue && f.NoOptDefVal == "" {
			i++ // the flag's value
		}
	}
	return out
}

// lookupFlag finds a flag of cmd: its own, its persistent ones or its parents'.
func lookupFlag(cmd *cobra.Command, lookup func(*pflag.FlagSet) *pflag.Flag) *pflag.Flag {
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.PersistentFlags(), cmd.InheritedFlags()} {
		if f := lookup(fs); f != nil {
			return f
		}
	}
	return nil
}

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}
