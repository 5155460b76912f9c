// Package logflags gives gpuslice's daemons the logging flags of Kubernetes
// components (k8s.io/component-base/logs): -v, --vmodule, --logging-format
// (text or json), --log-flush-frequency and the format options.
package logflags

import (
	"flag"
	"fmt"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json
)

// Config is the logging configuration the flags fill in.
type Config = logsapi.LoggingConfiguration

// AddGoFlags registers the flags on a standard library flag set.
func AddGoFlags(fs *flag.FlagSet) *Config {
	c := logsapi.NewLoggingConfiguration()
	BindGoFlags(c, fs)
	return c
}

// AddFlags registers the flags on a pflag flag set.
func AddFlags(fs *pflag.FlagSet) *Config {
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(c, fs)
	return c
}

// Validate checks the configuration (a bad value is the caller's usage error).
func Validate(c *Config) error {
	if errs := logsapi.Validate(c, nil, nil); len(errs) > 0 {
		return fmt.Errorf("logging flags: %w", errs.ToAggregate())
	}
	return nil
}

// Apply validates the configuration and makes it the process's klog
// configuration (once per process).
func Apply(c *Config) error {
	if err := Validate(c); err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(c, nil); err != nil {
		return fmt.Errorf("logging flags: %w", err)
	}
	return nil
}

// BindGoFlags registers the flags on a standard library flag set, bound to
// c (a configuration file's logging section, say).
func BindGoFlags(c *Config, fs *flag.FlagSet) {
	logsapi.AddGoFlags(c, fs)
}

// Default is the logging configuration with its defaults.
func Default() Config {
	return *logsapi.NewLoggingConfiguration()
}
