package dra

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
)

// configsOf is each request's GPUShareConfig, defaulted, for the requests
// (allocation results' Request: "<request>" or "<request>/<subrequest>")
// given: the annotation gpuslice.io/share-config (the live change) for
// every request; else the last opaque configuration of this driver that
// applies to the request (one naming no requests applies to all; one naming
// "<request>" to its subrequests too), the class's before the claim's;
// else DefaultConfig. Every configuration of this driver is decoded, so a
// bad one is an error naming it even where it applies to no request here.
func configsOf(claim *resourceapi.ResourceClaim, requests []string) (map[string]*drav1.GPUShareConfig, error) {
	out := make(map[string]*drav1.GPUShareConfig, len(requests))
	for _, r := range requests {
		out[r] = drav1.DefaultConfig()
	}
	cfgs := claim.Status.Allocation.Devices.Config
	order := make([]int, 0, len(cfgs))
	for i, c := range cfgs {
		if c.Opaque != nil && c.Opaque.Driver == DriverName {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return sourceRank(cfgs[a].Source) - sourceRank(cfgs[b].Source) })
	for _, i := range order {
		c := cfgs[i]
		d, err := drav1.Decode(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: config[%d] (from the %s): %w", claim.Namespace, claim.Name, i,
				map[resourceapi.AllocationConfigSource]string{resourceapi.AllocationConfigSourceClass: "DeviceClass",
					resourceapi.AllocationConfigSourceClaim: "claim"}[c.Source], err)
		}
		d.Default()
		for _, r := range requests {
			if appliesTo(c.Requests, r) {
				out[r] = d
			}
		}
	}
	if raw, ok := claim.Annotations[drav1.ShareConfigAnnotation]; ok {
		d, err := drav1.Decode([]byte(raw))
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: annotation %s: %w", claim.Namespace, claim.Name, drav1.ShareConfigAnnotation, err)
		}
		d.Default()
		for _, r := range requests {
			out[r] = d
		}
	}
	return out, nil
}

// sourceRank orders a class's configuration before a claim's.
func sourceRank(s resourceapi.AllocationConfigSource) int {
	if s == resourceapi.AllocationConfigSourceClass {
		return 0
	}
	return 1
}

// appliesTo reports whether a configuration naming requests (none: all)
// applies to allocation result request r.
func appliesTo(requests []string, r string) bool {
	return len(requests) == 0 || slices.Contains(requests, r) || slices.Contains(requests, resourceclaim.BaseRequestRef(r))
}

// oneConfig is the configuration of a claim's group: every request of the
// claim on this node must resolve to the same (a claim is one group, with
// one priority and one ceiling).
func oneConfig(claim *resourceapi.ResourceClaim, byRequest map[string]*drav1.GPUShareConfig) (*drav1.GPUShareConfig, error) {
	reqs := make([]string, 0, len(byRequest))
	for r := range byRequest {
		reqs = append(reqs, r)
	}
	slices.Sort(reqs)
	if len(reqs) == 0 {
		return drav1.DefaultConfig(), nil
	}
	first := byRequest[reqs[0]]
	for _, r := range reqs[1:] {
		if !reflect.DeepEqual(byRequest[r], first) {
			return nil, fmt.Errorf("claim %s/%s: requests %s and %s are configured differently (a claim is one group, "+
				"with one GPUShareConfig): give them the same configuration, or put them in claims of their own",
				claim.Namespace, claim.Name, reqs[0], r)
		}
	}
	return first, nil
}

// isAdmin reports whether an allocation result is for admin access.
func isAdmin(r resourceapi.DeviceRequestAllocationResult) bool {
	return r.AdminAccess != nil && *r.AdminAccess
}

// adminOnly checks a claim's results on this node: all admin access (true)
// or none (false). An admin device gets no group, gate or limit, and a
// claim's CDI spec is one for all its devices, so a claim mixing them is
// refused.
func adminOnly(claim *resourceapi.ResourceClaim, results []resourceapi.DeviceRequestAllocationResult) (bool, error) {
	var admin, tenant []string
	for _, r := range results {
		if isAdmin(r) {
			admin = append(admin, r.Request)
		} else {
			tenant = append(tenant, r.Request)
		}
	}
	if len(admin) > 0 && len(tenant) > 0 {
		return false, fmt.Errorf("claim %s/%s: requests %s with adminAccess and %s without: put the admin-access "+
			"requests in a claim of their own", claim.Namespace, claim.Name, strings.Join(admin, ","), strings.Join(tenant, ","))
	}
	return len(admin) > 0, nil
}
