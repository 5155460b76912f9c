package deviceplugin

import (
	"fmt"
	"slices"
)

// Units mode: the plugin advertises a GPU's units (api.DefaultUnitsPerGPU
// slots per GPU, one per unit) as gpuslice.io/gpu-units, so the kubelet
// calls Allocate for a container that asks a share by units alone, and its
// count of units per GPU is the scheduler's.

// ResolveUnits picks the container an allocation of size units is for: the
// only candidate asking for that many units, with a share assignment of
// size units on each of its GPUs.
func ResolveUnits(cands []Candidate, size int) (Candidate, error) {
	c, err := resolveOne(cands, size)
	if err != nil {
		return c, err
	}
	if len(c.GPUs) == 0 {
		return c, fmt.Errorf("%s: %w: the assignment has no GPUs", c, ErrMismatch)
	}
	for _, g := range c.GPUs {
		if g.Exclusive || g.Units != int64(size) {
			return c, fmt.Errorf("%s: %w: the assignment gives GPU %d %d units (exclusive %v), the container requests %d", c, ErrMismatch, g.Index, g.Units, g.Exclusive, size)
		}
	}
	return c, nil
}

// PreferUnits chooses size unit slots on c's assigned GPUs: the must-include
// ones first, then the lowest free slots, at most a GPU's assigned units
// from each GPU (so the kubelet never counts more units on a GPU than the
// scheduler booked there).
func PreferUnits(c Candidate, available, mustInclude []string, size int) ([]string, error) {
	quota := map[string]int{}
	for _, g := range c.GPUs {
		quota[g.UUID] = int(g.Units)
	}
	out := make([]string, 0, size)
	take := func(ids []string) error {
		for _, id := range ids {
			if len(out) == size {
				return nil
			}
			uuid, _, err := ParseSlotID(id)
			if err != nil {
				return err
			}
			if quota[uuid] > 0 && !slices.Contains(out, id) {
				quota[uuid]--
				out = append(out, id)
			}
		}
		return nil
	}
	free := slices.Clone(available)
	slices.SortFunc(free, compareSlots)
	if err := take(mustInclude); err != nil {
		return nil, err
	}
	if err := take(free); err != nil {
		return nil, err
	}
	if len(out) < size {
		return nil, fmt.Errorf("%s: %w: only %d of %d unit slots free on the assigned GPUs", c, ErrMismatch, len(out), size)
	}
	return out, nil
}

// TieUnits checks that ids (the kubelet's allocation) are size distinct
// unit slots on c's assigned GPUs, at most a GPU's assigned units on each.
func TieUnits(c Candidate, ids []string) error {
	quota := map[string]int{}
	for _, g := range c.GPUs {
		quota[g.UUID] = int(g.Units)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		uuid, _, err := ParseSlotID(id)
		if err != nil {
			return err
		}
		if seen[id] {
			return fmt.Errorf("%s: %w: unit slot %s given twice", c, ErrMismatch, id)
		}
		seen[id] = true
		if quota[uuid] == 0 {
			return fmt.Errorf("%s: %w: unit slot %s is not on an assigned GPU with units left", c, ErrMismatch, id)
		}
		quota[uuid]--
	}
	return nil
}

// compareSlots orders slot IDs by GPU, then slot number (malformed last).
func compareSlots(a, b string) int {
	ua, ka, ea := ParseSlotID(a)
	ub, kb, eb := ParseSlotID(b)
	switch {
	case ea != nil || eb != nil:
		return compareBool(ea != nil, eb != nil)
	case ua != ub:
		if ua < ub {
			return -1
		}
		return 1
	}
	return ka - kb
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
