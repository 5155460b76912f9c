// Package gpuset is the node agent's model of the GPUs it manages: each one's
// index, UUID, device node and health. The device plugin advertises them, the
// hot-plug reconciler, health monitor, MPS servers and CDI spec work on them;
// none of those owns the model.
package gpuset

// GPU is one device the node manages.
type GPU struct {
	Index int32
	UUID  string
	// Minor is N of the device node /dev/nvidiaN.
	Minor   uint32
	Healthy bool
}
