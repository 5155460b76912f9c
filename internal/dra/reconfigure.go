package dra

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
)

// Reconfigure applies a prepared claim's configuration again, after its
// gpuslice.io/share-config annotation changed: its group's settings are set
// through the groups manager, which returns once the daemon enforces them.
// A claim not prepared on this node is not ours (false, nil). A bad
// configuration is an error naming the field, and changes nothing.
func (d *Driver) Reconfigure(ctx context.Context, claim *resourceapi.ResourceClaim) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.ck.Claims[string(claim.UID)]
	if !ok || c.State != checkpoint.PrepareCompleted || c.Group == "" {
		return false, nil
	}
	p, err := planClaim(claim, d.cfg.Pool, d.cfg.GPUs)
	if err != nil {
		return true, err
	}
	if err := d.cfg.Groups.Set(ctx, c.Group, groupmgr.Resources{Settings: p.settings}); err != nil {
		return true, fmt.Errorf("claim %s/%s: group %s: %w", claim.Namespace, claim.Name, c.Group, err)
	}
	return true, nil
}
