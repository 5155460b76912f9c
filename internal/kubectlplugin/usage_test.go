package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/gpuslice/gpuslice/internal/output"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
)

const gib = int64(1) << 30

func pod(t *testing.T, ns, name string, phase corev1.PodPhase, a *api.Assignment) corev1.Pod {
	t.Helper()
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: phase}}
	if a != nil {
		b, err := a.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{api.AnnotationAssignment: string(b)}
	}
	return p
}

func share(node string, c string, gpus ...api.GPUAssignment) *api.Assignment {
	return &api.Assignment{Version: api.AssignmentVersion, Node: node, Containers: []api.ContainerAssignment{{Name: c, GPUs: gpus}}}
}

func fixture(t *testing.T) ([]v1alpha2.GPUNode, []corev1.Pod) {
	hb := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	gpu := func(i int32, free int64) v1alpha2.GPU {
		return v1alpha2.GPU{Index: i, UUID: "GPU-" + string(rune('a'+i)), Model: "A100", Memory: v1alpha2.Bytes(40 * gib), UnitsTotal: 100,
			UnitsFree: free, MemoryFree: v1alpha2.Bytes(40 * gib), Health: v1alpha2.GPUHealthy, UtilizationPercent: 37}
	}
	nodes := []v1alpha2.GPUNode{
		{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: v1alpha2.GPUNodeStatus{State: v1alpha2.NodeDraining, UpdateTime: metav1.NewTime(hb)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1alpha2.GPUNodeStatus{State: v1alpha2.NodeWorking, UpdateTime: metav1.NewTime(hb),
			GPUs: []v1alpha2.GPU{gpu(1, 0), gpu(0, 20)}}},
	}
	nodes[1].Status.GPUs[0].SharingMode = api.SharingMPS
	pods := []corev1.Pod{
		pod(t, "b", "half", corev1.PodRunning, share("n1", "main", api.GPUAssignment{Index: 0, UUID: "GPU-a", Units: 50, MemoryBytes: 4 * gib})),
		pod(t, "a", "third", corev1.PodPending, share("n1", "c", api.GPUAssignment{Index: 0, UUID: "GPU-a", Units: 30, MemoryBytes: 2 * gib})),
		pod(t, "a", "whole", corev1.PodRunning, share("n1", "c", api.GPUAssignment{Index: 1, UUID: "GPU-b", Units: 100, MemoryBytes: 40 * gib, Exclusive: true})),
		pod(t, "a", "done", corev1.PodSucceeded, share("n1", "c", api.GPUAssignment{Index: 0, UUID: "GPU-a", Units: 10})),
		pod(t, "a", "plain", corev1.PodRunning, nil),
	}
	bad := pod(t, "a", "bad", corev1.PodRunning, nil)
	bad.Annotations = map[string]string{api.AnnotationAssignment: `{"version":"v9"}`}
	return nodes, append(pods, bad)
}

func TestTop(t *testing.T) {
	nodes, pods := fixture(t)
	doc := Top(nodes, pods)
	hb := nodes[0].Status.UpdateTime.Time
	holder, renewed := "n1", metav1.NewMicroTime(hb)
	kube := kubefake.NewSimpleClientset(&coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: api.LeaseNamespace, Name: api.LeaseName("n1"),
		Labels: map[string]string{api.LabelLeaseNode: "n1"}}, Spec: coordv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &renewed}})
	if err := heartbeats(context.Background(), kube, doc.Nodes); err != nil || !doc.Nodes[0].Heartbeat.Equal(hb) || !doc.Nodes[1].Heartbeat.IsZero() {
		t.Fatalf("heartbeats from Leases: %v %+v", err, doc.Nodes)
	}
	if doc.APIVersion != output.APIVersion || doc.Kind != "GPUTop" || len(doc.Nodes) != 2 || doc.Nodes[0].Name != "n1" ||
		len(doc.Nodes[1].GPUs) != 0 || doc.Nodes[1].State != "Draining" {
		t.Fatalf("top: %+v", doc)
	}
	g0, g1 := doc.Nodes[0].GPUs[0], doc.Nodes[0].GPUs[1]
	if g0.Index != 0 || g0.UnitsBooked != 80 || g0.MemoryBookedBytes != 6*gib || g0.Pods != 2 || g0.Exclusive || g0.SharingMode != "timeslice" {
		t.Errorf("gpu 0 (two shares; the finished pod and the unreadable annotation left out): %+v", g0)
	}
	if g1.Index != 1 || g1.UnitsBooked != 100 || g1.Pods != 1 || !g1.Exclusive || g1.SharingMode != "mps" {
		t.Errorf("gpu 1 (one whole-GPU pod): %+v", g1)
	}
	now := nodes[0].Status.UpdateTime.Add(90 * time.Second)
	var b bytes.Buffer
	if err := WriteTop(&b, doc, output.Table, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"NODE GPU MODEL MODE STATE HEALTH UNITS MEMORY UTIL PODS",
		"n1 0 A100 timeslice Working Healthy 80/100 6.0 GiB / 40.0 GiB 37% 2",
		"n1 1 A100 mps Working Healthy 100/100 40.0 GiB / 40.0 GiB 37% 1",
		"n2 - no GPU - Draining - - - - 0",
	}
	for i, w := range want {
		if i >= len(lines) || strings.Join(strings.Fields(lines[i]), " ") != w {
			t.Errorf("table line %d:\n%s\nwant %q", i, b.String(), w)
		}
	}
	b.Reset()
	if err := WriteTop(&b, doc, output.Wide, now); err != nil || !strings.Contains(b.String(), "GPU-a") || !strings.Contains(b.String(), "90s") {
		t.Errorf("wide: %v\n%s", err, b.String())
	}
	b.Reset()
	var back TopDoc
	if err := WriteTop(&b, doc, output.JSON, now); err != nil || json.Unmarshal(b.Bytes(), &back) != nil || back.Nodes[0].GPUs[0].UnitsBooked != 80 {
		t.Errorf("json: %v\n%s", err, b.String())
	}
}

func TestShares(t *testing.T) {
	_, pods := fixture(t)
	doc := Shares(pods)
	if doc.Kind != "GPUPodList" || len(doc.Items) != 3 {
		t.Fatalf("shares: %+v", doc)
	}
	if s := doc.Items[0]; s.Namespace != "a" || s.Pod != "third" || s.Units != 30 || s.Node != "n1" || s.Phase != "Pending" {
		t.Errorf("first share: %+v", s)
	}
	var b bytes.Buffer
	if err := WritePods(&b, doc, output.Table); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[3]), " ") != "b half main n1 0 50 4.0 GiB Running" {
		t.Errorf("table:\n%s", b.String())
	}
	b.Reset()
	if err := WritePods(&b, doc, output.YAML); err != nil || !strings.Contains(b.String(), "kind: GPUPodList") {
		t.Errorf("yaml: %v\n%s", err, b.String())
	}
	b.Reset()
	if err := WritePods(&b, PodsDoc{TypeMeta: output.Meta("GPUPodList"), Items: []PodShare{}}, output.JSON); err != nil ||
		!strings.Contains(b.String(), `"items": []`) {
		t.Errorf("empty json: %v\n%s", err, b.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"top", "-o", "xml"}, {"pods", "extra"}, {"pods", "--nope"}} {
		var out, errOut bytes.Buffer
		code := Main(t.Context(), args, streams(&out, &errOut))
		if code != 2 || !strings.HasPrefix(errOut.String(), Binary+": ") {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, errOut.String())
		}
	}
}

func streams(out, errOut *bytes.Buffer) genericiooptions.IOStreams {
	return genericiooptions.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: errOut}
}
