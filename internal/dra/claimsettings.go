package dra

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/group"
)

// ClaimSettings are the group settings that preparing claim on this node's
// pool with gpus (by device name) sets: its allocation and configuration
// read as Prepare reads them (planClaim), translated by gpurequest.
func ClaimSettings(claim *resourceapi.ResourceClaim, pool string, gpus map[string]GPU) (group.Settings, error) {
	p, err := planClaim(claim, pool, gpus)
	return p.settings, err
}
