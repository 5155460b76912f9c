// Package v1alpha1 is version v1alpha1 of gpuslice-node's configuration file:
// apiVersion gpuslice.io/v1alpha1, kind NodeConfig (the gpuslice.io group's
// version and naming; a file, not a served resource, so it has no deepcopy or
// client and is kept apart from the GPUNode types in pkg/apis/gpuslice).
//
// The layout only: defaults are the node agent's (internal/agent
// DefaultConfig), decoding, the environment and flags are internal/nodeconfig's,
// and every setting keeps its meaning from the flag of the same name
// (docs/node-agent.md, Configuration file).
package v1alpha1
