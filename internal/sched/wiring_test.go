package sched

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

func TestUnpublished(t *testing.T) {
	for name, tc := range map[string]struct {
		st   v1alpha2.GPUNodeStatus
		want bool
	}{
		"created, no status": {v1alpha2.GPUNodeStatus{}, true},
		"published":          {v1alpha2.GPUNodeStatus{State: v1alpha2.NodeWorking, UpdateTime: metav1.Now()}, false},
		"state only":         {v1alpha2.GPUNodeStatus{State: v1alpha2.NodeNotReady}, false},
		"gpus only":          {v1alpha2.GPUNodeStatus{GPUs: []v1alpha2.GPU{{UUID: "a"}}}, false},
	} {
		if got := unpublished(&v1alpha2.GPUNode{Status: tc.st}); got != tc.want {
			t.Errorf("%s: unpublished = %v, want %v", name, got, tc.want)
		}
	}
}
