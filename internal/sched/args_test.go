package sched

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/pkg/api"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeArgs(t *testing.T) {
	unk := func(s string) runtime.Object { return &runtime.Unknown{Raw: []byte(s)} }
	c, err := DecodeArgs(nil)
	if err != nil || c.DefaultPlacement != DefaultPlacement || c.UtilizationThreshold != DefaultUtilizationThreshold || c.HeartbeatTimeout != DefaultHeartbeatTimeout {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c, err = DecodeArgs(unk("apiVersion: gpuslice.io/v1alpha1\nkind: GPUSliceArgs\nplacement: spread\nutilizationThreshold: 0\nheartbeatTimeout: 5s\nallowUnscheduledProcesses: true\n"))
	if err != nil || c.DefaultPlacement != api.PlacementSpread || c.UtilizationThreshold != 0 || c.HeartbeatTimeout != 5*time.Second || !c.AllowUnscheduledProcesses {
		t.Fatalf("yaml: %+v %v", c, err)
	}
	c, err = DecodeArgs(unk(`{"placement":"first-fit"}`))
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
	}
	for name, in := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeArgs(unk(in)); err == nil || !strings.Contains(err.Error(), Name+" args") {
				t.Fatalf("err = %v", err)
			}
		})
	}
	thr := int32(50)
	c, err = DecodeArgs(&Args{UtilizationThreshold: &thr})
	if err != nil || c.UtilizationThreshold != 50 {
		t.Fatalf("typed: %+v %v", c, err)
	}
}
