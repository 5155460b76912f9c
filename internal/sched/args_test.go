package sched

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuslice/gpuslice/pkg/api"
)

func TestDecodeArgs(t *testing.T) {
	unk := func(s string) runtime.Object { return &runtime.Unknown{Raw: []byte(s)} }
	st, err := DecodeArgs(nil)
	c := st.Alloc
	if err != nil || st.CandidateNodes != DefaultCandidateNodes || c.DefaultPlacement != DefaultPlacement || c.UtilizationThreshold != DefaultUtilizationThreshold || c.HeartbeatTimeout != DefaultHeartbeatTimeout {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	st, err = DecodeArgs(unk("apiVersion: gpuslice.io/v1alpha1\nkind: GPUSliceArgs\nplacement: spread\nutilizationThreshold: 0\nheartbeatTimeout: 5s\nallowUnscheduledProcesses: true\ncandidateNodes: 0\n"))
	c = st.Alloc
	if err != nil || st.CandidateNodes != 0 || c.DefaultPlacement != api.PlacementSpread || c.UtilizationThreshold != 0 || c.HeartbeatTimeout != 5*time.Second || !c.AllowUnscheduledProcesses {
		t.Fatalf("yaml: %+v %v", c, err)
	}
	st, err = DecodeArgs(unk(`{"placement":"first-fit"}`))
	c = st.Alloc
	if err != nil || c.DefaultPlacement != api.PlacementFirstFit {
		t.Fatalf("json: %+v %v", c, err)
	}
	bad := map[string]string{
		"unknown field": `{"placment":"spread"}`,
		"placement":     `{"placement":"tight"}`,
		"threshold":     `{"utilizationThreshold":150}`,
		"timeout":       `{"heartbeatTimeout":"-1s"}`,
		"version":       `{"apiVersion":"gpuslice.io/v2"}`,
		"kind":          `{"kind":"Other"}`,
		"type":          `{"utilizationThreshold":"high"}`,
		"candidates":    `{"candidateNodes":-1}`,
	}
	for name, in := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeArgs(unk(in)); err == nil || !strings.Contains(err.Error(), Name+" args") {
				t.Fatalf("err = %v", err)
			}
		})
	}
	thr := int32(50)
	st, err = DecodeArgs(&Args{UtilizationThreshold: &thr})
	if err != nil || st.Alloc.UtilizationThreshold != 50 {
		t.Fatalf("typed: %+v %v", st, err)
	}
}
