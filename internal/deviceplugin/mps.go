package deviceplugin

import (
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/gpuslice/gpuslice/internal/mps"
)

// MPSGPU is how containers on a GPU in mps mode reach its MPS servers.
type MPSGPU struct {
	// PipeDirs are the pipe directories of the GPU's control daemons (one
	// per server slot), mounted at the same path in the container.
	PipeDirs []string
	// ServerUnits is the units one server's clients share (M x N): a
	// container's active thread percentage is its units out of these.
	ServerUnits int64
}

// addMPS makes a container on an mps GPU an MPS client: the pipe directory
// of one of the GPU's servers (chosen by the group name), its active thread
// percentage and pinned memory limit, and libgpuslice's time-slice gate off
// (kernels share the GPU through MPS; the memory limit, view and process
// list stay).
func (in Inject) addMPS(c Candidate, group string, r *edits) error {
	var on []string
	for _, a := range c.GPUs {
		if _, ok := in.MPS[a.UUID]; ok {
			on = append(on, a.UUID)
		}
	}
	if len(on) == 0 {
		return nil
	}
	if len(c.GPUs) != 1 {
		return fmt.Errorf("%s: assigned %d GPUs including mps GPU %s: an MPS client uses one GPU", c, len(c.GPUs), on[0])
	}
	a, m := c.GPUs[0], in.MPS[on[0]]
	if len(m.PipeDirs) == 0 {
		return fmt.Errorf("%s: mps GPU %s has no MPS server", c, a.UUID)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(group))
	pipe := m.PipeDirs[int(h.Sum32()%uint32(len(m.PipeDirs)))]
	pct := 100
	if !a.Exclusive && a.Units > 0 {
		p, err := mps.ThreadPercentage(a.Units, m.ServerUnits)
		if err != nil {
			return fmt.Errorf("%s: %w", c, err)
		}
		pct = p
	}
	r.mount(pipe, pipe, false)
	r.env["CUDA_MPS_PIPE_DIRECTORY"] = pipe
	r.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = strconv.Itoa(pct)
	if lim := mps.PinnedMemLimit(MemoryLimit(c), 1); lim != "" {
		r.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = lim
	}
	r.env["GPUSLICE_GATE"] = "off"
	return nil
}
