package v1alpha1

// Duration is a Go duration string ("1s", "500ms", "1m30s"), parsed when the
// file is read so that a bad one is reported with its field's name.
type Duration string

// NodeConfig and its sections (zz_generated.types.go) are generated from the
// rows of agent.NodeSettings by `go generate ./internal/nodeconfig`.

// Version identifiers of this file format.
const (
	Group      = "gpuslice.io"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "NodeConfig"
)
