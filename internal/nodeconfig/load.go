// Package nodeconfig is gpuslice-node's configuration: the versioned file
// (pkg/apis/nodeconfig), the environment and the command line, merged with
// the precedence NVIDIA's k8s-device-plugin uses: flags over the environment
// over the file over the defaults (internal/agent DefaultConfig). Every
// setting is one flag, one environment variable (GPUSLICE_NODE_<FLAG>) and
// one file field, with its default and range: one row of agent.NodeSettings.
package nodeconfig

//go:generate go run ./gen -doc ../../docs/node-agent.md

import (
	"errors"
	"fmt"
	"io"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/logflags"
)

// Options is what gpuslice-node runs with.
type Options struct {
	Agent   agent.Config
	Logging logflags.Config
	// InstallLibrary is copied to Agent.Library at start ("": none).
	InstallLibrary string
	// ConfigFile is the file read ("": none).
	ConfigFile string
	// ShowVersion: print the version and exit (nothing else is loaded).
	ShowVersion bool
}

// Load builds the options: the defaults for env, then the configuration
// file (--config, else $GPUSLICE_NODE_CONFIG), then each setting's
// environment variable, then the command line args. Usage and flag errors
// go to usage; flag.ErrHelp is returned for -h.
func Load(args []string, env func(string) (string, bool), usage io.Writer) (Options, error) {
	getenv := func(k string) string { v, _ := env(k); return v }
	defaults := agent.DefaultConfig(getenv)
	file := FromAgent(defaults)
	// Pass 1: the command line alone, for its errors, --config and --version.
	first := FromAgent(defaults)
	f := newFlagSet(&first)
	f.fs.SetOutput(usage)
	if err := f.fs.Parse(args); err != nil {
		return Options{}, err
	}
	if f.fs.NArg() > 0 {
		return Options{}, fmt.Errorf("unexpected argument %q (settings are flags or the configuration file)", clip(f.fs.Arg(0)))
	}
	if f.version {
		return Options{ShowVersion: true}, nil
	}
	o := Options{ConfigFile: f.config}
	if o.ConfigFile == "" {
		o.ConfigFile = getenv(EnvConfig)
	}
	if o.ConfigFile != "" {
		if err := ReadFile(o.ConfigFile, &file); err != nil {
			return Options{}, err
		}
	}
	// Pass 2: the environment, then the command line, onto the file.
	f = newFlagSet(&file)
	f.fs.SetOutput(io.Discard)
	if err := f.applyEnv(env); err != nil {
		return Options{}, err
	}
	if err := f.fs.Parse(args); err != nil {
		return Options{}, err // pass 1 accepted the same args
	}
	cfg, err := ToAgent(file, defaults)
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil {
		err = logflags.Validate(&file.Logging)
	}
	if err != nil {
		if o.ConfigFile != "" {
			err = fmt.Errorf("%w\n(settings from the configuration file %s, the environment and the flags)", err, o.ConfigFile)
		}
		return Options{}, err
	}
	o.Agent, o.Logging, o.InstallLibrary = cfg, file.Logging, file.InstallLibrary
	return o, nil
}

// applyEnv sets each setting whose environment variable is set ($NODE_NAME
// then $GPUSLICE_NODE_NODE_NAME for --node-name).
func (f *flagSet) applyEnv(env func(string) (string, bool)) error {
	var errs []error
	for _, s := range f.settings {
		names := []string{EnvName(s.Flag)}
		if s.Flag == "node-name" {
			names = []string{EnvNodeName, EnvName(s.Flag)}
		}
		for _, name := range names {
			v, ok := env(name)
			if !ok {
				continue
			}
			if err := f.fs.Set(s.Flag, v); err != nil {
				errs = append(errs, fmt.Errorf("$%s (%s): %w", name, s.Field, err))
			}
		}
	}
	return errors.Join(errs...)
}
