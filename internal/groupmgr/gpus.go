package groupmgr

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
)

// FileGPUs is the file of a group's directory that lists its GPUs
// (Resources.GPUs): one GPU UUID a line, sorted. The groups manager is its
// only writer; the node agent's hot add and remove of whole GPUs in running
// containers gives a container the device nodes of the GPUs its group holds.
const FileGPUs = group.FileGPUs

// maxGPUIDLen bounds one GPU's ID in FileGPUs (NVML's UUIDs are 40 bytes,
// MIG instances' 44).
const maxGPUIDLen = 96

// normalGPUs validates a group's GPUs (at most groupstate.MaxGPUs distinct
// IDs of printable characters without spaces) and returns them sorted.
func normalGPUs(gpus []string) ([]string, error) {
	if len(gpus) > groupstate.MaxGPUs {
		return nil, fmt.Errorf("%w: %d GPUs, at most %d", group.ErrInvalid, len(gpus), groupstate.MaxGPUs)
	}
	out := slices.Clone(gpus)
	slices.Sort(out)
	for i, id := range out {
		if id == "" || len(id) > maxGPUIDLen || strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
			return nil, fmt.Errorf("%w: GPU ID %q: want 1-%d printable characters without spaces", group.ErrInvalid, id, maxGPUIDLen)
		}
		if i > 0 && out[i-1] == id {
			return nil, fmt.Errorf("%w: GPU %s named twice", group.ErrInvalid, id)
		}
	}
	return out, nil
}

// formatGPUs is FileGPUs' content for normalised GPUs.
func formatGPUs(gpus []string) string {
	if len(gpus) == 0 {
		return ""
	}
	return strings.Join(gpus, "\n") + "\n"
}

// readGPUs reads a group's GPUs: nil when the group has no FileGPUs (made
// by a caller that does not say, or by an older release).
func (m *Manager) readGPUs(name string) ([]string, error) {
	v, err := m.tree.ReadFile(name, FileGPUs)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	gpus := []string{}
	if v != "" {
		gpus = strings.Split(v, "\n")
	}
	out, err := normalGPUs(gpus)
	if err != nil {
		return nil, fmt.Errorf("group %s: %s: %w", name, FileGPUs, err)
	}
	return out, nil
}
