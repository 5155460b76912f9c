package mps

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// ThreadPercentage is CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for a client holding
// units of a server whose clients share serverUnits: rounded up, 1..100.
func ThreadPercentage(units, serverUnits int64) (int, error) {
	if units <= 0 || serverUnits <= 0 {
		return 0, fmt.Errorf("thread percentage of %d units out of %d: both must be positive", units, serverUnits)
	}
	if units >= serverUnits {
		return 100, nil
	}
	return int((units*100 + serverUnits - 1) / serverUnits), nil
}

// PinnedMemLimit is CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for a client with a
// per-GPU memory limit on its devices 0..gpus-1: "0=<MiB>M,1=<MiB>M,..."
// (whole MiB, rounded down, at least 1). "" when memBytes is 0 (no limit).
func PinnedMemLimit(memBytes int64, gpus int) string {
	if memBytes <= 0 || gpus <= 0 {
		return ""
	}
	mib := max(memBytes>>20, 1)
	out := ""
	for i := range gpus {
		if i > 0 {
			out += ","
		}
		out += strconv.Itoa(i) + "=" + strconv.FormatInt(mib, 10) + "M"
	}
	return out
}

// FreeUnits is what a GPU in mps mode can still give: the units not booked,
// bounded by the client slots left (each client slot is worth unitsPerClient).
func FreeUnits(unbooked int64, liveClients, clientSlots, unitsPerClient int) int64 {
	slots := int64(max(clientSlots-liveClients, 0)) * int64(unitsPerClient)
	return max(min(unbooked, slots), 0)
}

// GPURef names one GPU for ParseModes.
type GPURef struct {
	Index int32
	UUID  string
}

// ParseModes reads the node's sharing configuration: one mode for every GPU
// ("timeslice", "mps"), or comma-separated <index or UUID>=<mode> entries
// (GPUs not named: timeslice). Returns the mode of each GPU by UUID.
func ParseModes(spec string, gpus []GPURef) (map[string]api.SharingMode, error) {
	out := make(map[string]api.SharingMode, len(gpus))
	for _, g := range gpus {
		out[g.UUID] = api.SharingTimeslice
	}
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return out, nil
	}
	if !strings.Contains(spec, "=") {
		m, err := api.ParseSharingMode(spec)
		if err != nil {
			return nil, err
		}
		for _, g := range gpus {
			out[g.UUID] = m
		}
		return out, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("sharing %q: entry %q: want <index or UUID>=<mode>", spec, part)
		}
		m, err := api.ParseSharingMode(val)
		if err != nil {
			return nil, fmt.Errorf("sharing %q: %w", spec, err)
		}
		uuid := ""
		for _, g := range gpus {
			if key == g.UUID || key == strconv.Itoa(int(g.Index)) {
				uuid = g.UUID
			}
		}
		if uuid == "" || seen[uuid] {
			return nil, fmt.Errorf("sharing %q: GPU %q not on this node or named twice", spec, key)
		}
		seen[uuid] = true
		out[uuid] = m
	}
	return out, nil
}
