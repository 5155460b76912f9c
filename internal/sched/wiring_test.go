package sched

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/api"
)

func TestUnpublished(t *testing.T) {
	for name, tc := range map[string]struct {
		st   api.GPUNodeStatus
		want bool
	}{
		"created, no status": {api.GPUNodeStatus{}, true},
		"published":          {api.GPUNodeStatus{State: api.NodeWorking, Heartbeat: metav1.Now()}, false},
		"state only":         {api.GPUNodeStatus{State: api.NodeNotReady}, false},
		"gpus only":          {api.GPUNodeStatus{GPUs: []api.GPU{{UUID: "a"}}}, false},
	} {
		if got := unpublished(&api.GPUNode{Status: tc.st}); got != tc.want {
			t.Errorf("%s: unpublished = %v, want %v", name, got, tc.want)
		}
	}
}
