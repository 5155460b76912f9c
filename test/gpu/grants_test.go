//go:build gpusuite

package gpu

import (
	"fmt"

	"github.com/gpuslice/gpuslice/internal/nodestatus"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// grantSample is, per tenant, the GPU time the time-slice daemon granted
// its group so far (status.json, summed over GPUs) and the run delay of
// each thread of its processes (by thread ID), both cumulative.
type grantSample struct {
	granted []int64
	waited  []map[int]int64
}

// sampleGrants reads the daemon's status and the CPU waits of the tenants'
// processes (the children of their `gpuslice run` processes).
func (s *suite) sampleGrants(groups []string, pids []int) (grantSample, error) {
	st, err := nodestatus.Read(s.runDir)
	if err != nil {
		return grantSample{}, fmt.Errorf("daemon status: %w", err)
	}
	g := grantSample{granted: make([]int64, len(groups)), waited: make([]map[int]int64, len(groups))}
	seen := make([]bool, len(groups))
	for _, gpu := range st.GPUs {
		for _, e := range gpu.Groups {
			for i, name := range groups {
				if e.Group == name {
					g.granted[i] += e.AchievedNs
					seen[i] = true
				}
			}
		}
	}
	for i, name := range groups {
		if !seen[i] {
			return grantSample{}, fmt.Errorf("group %s is not in the daemon's status", name)
		}
		g.waited[i] = map[int]int64{}
		for _, pid := range harness.Children(pids[i]) { // the tenant, not gpuslice run waiting for it
			harness.RunDelays(pid, g.waited[i])
		}
	}
	return g, nil
}

// grantShares is each tenant's share (percent) of the time granted between
// two samples, and how long they waited for a CPU: per tenant the most any
// one of its threads waited, summed, in points of the time granted.
func grantShares(a, b grantSample) (shares []float64, starved float64, err error) {
	var total, waited int64
	for i := range a.granted {
		total += b.granted[i] - a.granted[i]
		var most int64
		for tid, w := range b.waited[i] {
			most = max(most, w-a.waited[i][tid])
		}
		waited += most
	}
	if total <= 0 {
		return nil, 0, fmt.Errorf("no GPU time granted over the window (%v -> %v)", a.granted, b.granted)
	}
	shares = make([]float64, len(a.granted))
	for i := range shares {
		shares[i] = 100 * float64(b.granted[i]-a.granted[i]) / float64(total)
	}
	return shares, 100 * float64(waited) / float64(total), nil
}
