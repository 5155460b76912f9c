package deviceplugin

import (
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuslice/gpuslice/internal/gpuset"
)

// TestNVIDIAContract: the container's GPUs, and only them, by UUID in every
// form the NVIDIA toolkit reads (env, volume mounts, CDI names).
func TestNVIDIAContract(t *testing.T) {
	c := Candidates([]*corev1.Pod{pod("a", []int64{2}, [][]int32{{3, 1}})}, res, Records{})[0]
	gpus := map[string]gpuset.GPU{}
	for i := range int32(4) {
		gpus[uuid(i)] = gpuset.GPU{Index: i, UUID: uuid(i), Minor: uint32(i), Healthy: true}
	}
	for _, kind := range []string{"", "gpuslice.io/gpu", "nvidia.com/gpu"} {
		r, err := Inject{DevRoot: "/dev", CDIKind: kind, Env: map[string]string{}}.Response(c, gpus, GroupName(c))
		if err != nil {
			t.Fatal(err)
		}
		mine := []string{uuid(1), uuid(3)}
		slices.Sort(mine)
		if got := r.Envs[EnvVisibleDevices]; got != strings.Join(mine, ",") {
			t.Errorf("kind %q: %s=%q, want %q", kind, EnvVisibleDevices, got, strings.Join(mine, ","))
		}
		var vols []string
		for _, m := range r.Mounts {
			if strings.HasPrefix(m.ContainerPath, VolumeDevicesDir+"/") {
				if m.HostPath != "/dev/null" || !m.ReadOnly {
					t.Errorf("volume-mount entry %+v", m)
				}
				vols = append(vols, path.Base(m.ContainerPath))
			}
		}
		if !slices.Equal(vols, mine) {
			t.Errorf("kind %q: volume-mount list %v, want %v", kind, vols, mine)
		}
		var cdi []string
		for _, d := range r.CdiDevices {
			cdi = append(cdi, d.Name)
		}
		var want []string
		if kind != "" {
			want = []string{kind + "=" + mine[0], kind + "=" + mine[1]}
		}
		if !slices.Equal(cdi, want) {
			t.Errorf("kind %q: CDI devices %v, want %v", kind, cdi, want)
		}
	}
}

func TestNVIDIAContractNoGPU(t *testing.T) {
	r, err := Inject{DevRoot: "/dev", CDIKind: "gpuslice.io/gpu"}.Response(Candidate{Namespace: "ns", Name: "p", Container: "c"}, nil, "g")
	if err != nil || r.Envs[EnvVisibleDevices] != "void" || len(r.Mounts) != 0 || len(r.CdiDevices) != 0 {
		t.Fatalf("no GPU: %+v %v", r, err)
	}
}

// TestPodEnvCannotWiden: a pod spec naming NVIDIA_VISIBLE_DEVICES itself is
// refused (the kubelet would put its value after ours).
func TestPodEnvCannotWiden(t *testing.T) {
	p := pod("a", []int64{1}, [][]int32{{0}})
	gpus := map[string]gpuset.GPU{uuid(0): {Index: 0, UUID: uuid(0), Minor: 0, Healthy: true}}
	for _, name := range []string{EnvVisibleDevices, "NVIDIA_VISIBLE_DEVICES_OVERRIDE"} {
		q := p.DeepCopy()
		q.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: name, Value: "all"}}
		c := Candidates([]*corev1.Pod{q}, res, Records{})[0]
		if _, err := (Inject{DevRoot: "/dev", Env: map[string]string{}}).Response(c, gpus, GroupName(c)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=all in the pod spec: %v", name, err)
		}
	}
	q := p.DeepCopy()
	q.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "CUDA_VISIBLE_DEVICES", Value: "0"}}
	c := Candidates([]*corev1.Pod{q}, res, Records{})[0]
	if _, err := (Inject{DevRoot: "/dev", Env: map[string]string{}}).Response(c, gpus, GroupName(c)); err != nil {
		t.Errorf("unrelated env refused: %v", err)
	}
}
