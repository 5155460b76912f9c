package cri

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerdInfo is the shape of containerd's verbose info (abridged);
// crioInfo CRI-O's.
const (
	containerdInfo = `{"sandboxID":"s1","pid":4242,"removing":false,"snapshotKey":"k","snapshotter":"overlayfs",
		"runtimeType":"io.containerd.runc.v2","runtimeOptions":{"systemd_cgroup":false},
		"config":{"metadata":{"name":"main"}},
		"runtimeSpec":{"ociVersion":"1.0.2-dev","linux":{"resources":{"devices":[{"allow":false,"access":"rwm"},
		{"allow":true,"type":"c","major":1,"minor":3,"access":"rwm"}]},"cgroupsPath":"/kubepods/pod1/c1"}}}`
	crioInfo = `{"sandboxID":"s1","pid":17,"runtimeSpec":{"ociVersion":"1.0.2","linux":{}},"privileged":false}`
)

func TestParseInfo(t *testing.T) {
	c, err := ParseInfo(containerdInfo)
	if err != nil || c.PID != 4242 || c.Spec == nil || len(c.Spec.Linux.Resources.Devices) != 2 || c.Spec.Linux.CgroupsPath != "/kubepods/pod1/c1" {
		t.Fatalf("containerd: %+v, %v", c, err)
	}
	if c, err := ParseInfo(crioInfo); err != nil || c.PID != 17 || c.Spec.Version != "1.0.2" {
		t.Fatalf("CRI-O: %+v, %v", c, err)
	}
	bad := []string{
		``, `null`, `[]`, `{`, `{"pid":1}`, `{"runtimeSpec":{}}`, `{"pid":0,"runtimeSpec":{}}`,
		`{"pid":-3,"runtimeSpec":{}}`, `{"pid":4194305,"runtimeSpec":{}}`, `{"pid":1.5,"runtimeSpec":{}}`,
		`{"pid":"7","runtimeSpec":{}}`, `{"pid":1,"runtimeSpec":null}`, `{"pid":1,"runtimeSpec":[]}`,
		`{"pid":1,"runtimeSpec":{"linux":{"resources":{"devices":[{"major":"x"}]}}}}`,
		`{"pid":1,"runtimeSpec":{}}x`,
		`{"pid":1,"runtimeSpec":{},"pad":"` + strings.Repeat("a", MaxInfoBytes) + `"}`,
	}
	for _, b := range bad {
		if _, err := ParseInfo(b); !errors.Is(err, ErrBadStatus) {
			name := b
			if len(name) > 80 {
				name = name[:80]
			}
			t.Errorf("%s: err = %v, want ErrBadStatus", name, err)
		}
	}
}

func TestParseStatus(t *testing.T) {
	running := func(id, info string) *runtimeapi.ContainerStatusResponse {
		r := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING}}
		if info != "" {
			r.Info = map[string]string{InfoKey: info}
		}
		return r
	}
	if c, err := ParseStatus("c1", running("c1", crioInfo)); err != nil || c.ID != "c1" || c.PID != 17 {
		t.Fatalf("%+v, %v", c, err)
	}
	exited := running("c1", crioInfo)
	exited.Status.State = runtimeapi.ContainerState_CONTAINER_EXITED
	cases := []struct {
		name string
		r    *runtimeapi.ContainerStatusResponse
		want error
	}{
		{"nil", nil, ErrBadStatus},
		{"no status", &runtimeapi.ContainerStatusResponse{}, ErrBadStatus},
		{"other container", running("c2", crioInfo), ErrBadStatus},
		{"exited", exited, ErrNotRunning},
		{"not verbose", running("c1", ""), ErrBadStatus},
		{"bad info", running("c1", `{"pid":1}`), ErrBadStatus},
	}
	for _, tc := range cases {
		if _, err := ParseStatus("c1", tc.r); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// The verbose info comes from the runtime, which reads parts of it from the
// container's creator: whatever it holds gives an error or a PID in range
// and a spec.
func FuzzParseInfo(f *testing.F) {
	for _, s := range []string{containerdInfo, crioInfo, `{"pid":1,"runtimeSpec":{}}`, `{"pid":0}`, `{}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseInfo(s)
		if err != nil {
			if !errors.Is(err, ErrBadStatus) {
				t.Fatalf("%q: %v does not wrap ErrBadStatus", s, err)
			}
			return
		}
		if c.PID <= 0 || c.PID > maxPID || c.Spec == nil {
			t.Fatalf("%q: %+v", s, c)
		}
	})
}
