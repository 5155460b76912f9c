package nodeconfig

import (
	"errors"

	"github.com/gpuslice/gpuslice/internal/agent"
	"github.com/gpuslice/gpuslice/internal/logflags"
	v1 "github.com/gpuslice/gpuslice/pkg/apis/nodeconfig/v1alpha1"
)

// FromAgent is the file form of the agent's configuration c (its defaults,
// before a file is read onto them), with the default logging configuration.
func FromAgent(c agent.Config) v1.NodeConfig {
	n := v1.NodeConfig{Logging: logflags.Default()}
	for _, s := range agent.NodeSettings() {
		s.FromConfig(&c, &n)
	}
	return n
}

// ToAgent is the agent's configuration from the file form n; settings the
// file has not (ProcRoot) come from base. A value that does not parse is
// an error naming its field and flag.
func ToAgent(n v1.NodeConfig, base agent.Config) (agent.Config, error) {
	c := base
	var errs []error
	for _, s := range agent.NodeSettings() {
		errs = append(errs, s.ToConfig(&n, &c))
	}
	return c, errors.Join(errs...)
}
