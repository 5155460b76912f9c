//go:build nodee2e

package nodee2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

// The DRA node: the stock kube-scheduler (default profile, so plain pods use
// it), kube-controller-manager's resource claim controller (claims from
// templates), containerd 1.7 with CDI (build-containerd.sh: Debian's 1.6 has
// no CDI, and the kubelet hands a DRA driver's devices to the runtime as CDI
// names), the real kubelet, and gpuslice-node with its DRA driver and
// without its device plugin (so gpuslice.io/gpu reaches pods only through
// the DeviceClass mapping).
const draScheduler = "default-scheduler"

// privateDRANode is privateNode for the DRA node.
func privateDRANode(t *testing.T, name string, opts ...func(*node)) (context.Context, *node, bool) {
	if !privateMountNS(t, name) {
		return nil, nil, false
	}
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 20*time.Minute)
	t.Cleanup(cancel)
	n := startDRANode(t, ctx, opts...)
	if _, err := n.cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		n.stop()
		t.Fatal(err)
	}
	return ctx, n, true
}

// startDRANode starts the DRA node; opts set the node up before its GPUs
// and agent start (simEnv, sliceDevices, agentFlags added).
func startDRANode(t *testing.T, ctx context.Context, opts ...func(*node)) *node {
	kubelet, kcm := need(t, "GPUSLICE_KUBELET"), need(t, "GPUSLICE_KCM")
	// containerd, its runc shim and ctr from the 1.7 build, first on PATH
	// (containerd finds its shim there).
	ctrDir := need(t, "GPUSLICE_CONTAINERD")
	if err := os.Setenv("PATH", ctrDir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		t.Fatal(err)
	}
	if got, err := exec.LookPath("containerd"); err != nil || filepath.Dir(got) != filepath.Clean(ctrDir) {
		t.Fatalf("containerd on PATH is %q (%v), want the one in %s", got, err, ctrDir)
	}
	n, bins := newNode(t, ctx, harness.Options{AuditAll: true}) // every request, for the RBAC check (dra_rbac_test.go)
	ok := false
	defer func() {
		if !ok {
			n.stop()
		}
	}()
	if err := n.cp.InstallCRDs(ctx); err != nil { // the agent still publishes its GPUNode row
		t.Fatal(err)
	}
	if err := n.cp.CreateDeviceClasses(ctx, true); err != nil {
		t.Fatal(err)
	}
	sp, err := n.cp.StartScheduler(ctx, bins.Path("kube-scheduler"), "kube-scheduler", harness.SchedulerOptions{SchedulerName: draScheduler})
	if err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, sp)
	cm, err := n.cp.StartClaimController(ctx, kcm)
	if err != nil {
		t.Fatal(err)
	}
	n.procs = append(n.procs, cm)
	n.cdiDir = filepath.Join(n.dir, "cdi")
	if err := os.MkdirAll(n.cdiDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n.groupFor = n.claimGroup
	n.sliceDevices = numGPUs
	for _, o := range opts {
		o(n)
	}
	n.simGPUs()
	n.images()
	n.startContainerd(ctx)
	n.startKubelet(ctx, kubelet)
	n.agentFlags = []string{"--node-name", nodeName, "--kubeconfig", n.cp.Kubeconfig, "--driver", "sim",
		"--sim-dir", filepath.Join(n.bin, "sim"), "--library", filepath.Join(n.bin, "libgpuslice.so"),
		"--run-dir", n.runDir(), "--socket", filepath.Join(n.runDir(), "node.sock"),
		"--dev-root", filepath.Join(n.dir, "dev"), "--control-devices", "", "--resync", "1s", "--publish-period", "1s",
		"--runtime-endpoint", "unix://" + n.ctrSock, "-v", "2",
		"--cdi-spec-dir", n.cdiDir, "--metrics-address", freeAddr(t),
		"--dra", "--device-plugin=false",
		"--dra-plugin-dir", draPluginDir, "--dra-registrar-dir", "/var/lib/kubelet/plugins_registry",
		"--dra-cdi-dir", n.cdiDir}
	n.agentFlags = append(n.agentFlags, n.extraAgentFlags...)
	n.agentLog = filepath.Join(n.dir, "gpuslice-node.log")
	n.startAgent()
	n.waitSlice(bounded(ctx), "published", func(d []resourceapi.Device) bool { return len(d) == n.sliceDevices })
	ok = true
	return n
}

// waitSlice waits until the node's gpuslice.io devices satisfy cond and
// returns them.
func (n *node) waitSlice(ctx context.Context, what string, cond func([]resourceapi.Device) bool) []resourceapi.Device {
	var devs []resourceapi.Device
	err := harness.WaitFor(ctx, 100*time.Millisecond, func() (bool, error) {
		l, err := n.cp.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		devs = devs[:0]
		for _, s := range l.Items {
			if s.Spec.Driver == harness.DRADriver && ptr.Deref(s.Spec.NodeName, "") == nodeName {
				devs = append(devs, s.Spec.Devices...)
			}
		}
		return cond(devs), nil
	})
	if err != nil {
		n.t.Fatalf("the node's ResourceSlice never %s: %v (devices %+v)\nagent log:\n%s", what, err, devs, n.agentTail())
	}
	return devs
}

// claimTemplate creates a ResourceClaimTemplate of draClaim(units, memory,
// gpu, config).
func (n *node) claimTemplate(ctx context.Context, name string, units, memory int64, gpu int, config string) {
	n.createTemplate(ctx, name, draClaim(units, memory, gpu, config))
}

// draClaim asks for a share of units and memory bytes of the GPU with index
// gpu (-1: any), with an opaque GPUShareConfig (raw JSON, "" for none).
func draClaim(units, memory int64, gpu int, config string) resourceapi.ResourceClaimSpec {
	spec := harness.DRAClaimSpec(harness.GPURequest{Units: units, Memory: memory})
	if gpu >= 0 {
		spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.attributes[%q].index == %d", harness.DRADriver, gpu)}}}
	}
	if config != "" {
		spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: harness.DRADriver, Parameters: runtime.RawExtension{Raw: []byte(config)}}}}}
	}
	return spec
}

func (n *node) createTemplate(ctx context.Context, name string, spec resourceapi.ResourceClaimSpec) {
	tpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
	if _, err := n.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tpl, metav1.CreateOptions{}); err != nil {
		n.t.Fatal(err)
	}
}

// draPod is a pod of the e2e image whose container uses a claim made from
// the template.
func draPod(name, template string, command ...string) *corev1.Pod {
	p := harness.DRAPod(ns, name, draScheduler, template, true)
	p.Spec.Tolerations = nil
	p.Spec.HostNetwork = true
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	c := &p.Spec.Containers[0]
	c.Image, c.ImagePullPolicy, c.Command = image, corev1.PullNever, command
	c.Resources.Requests = nil
	return p
}

// claimOf returns the pod's claim (made from its template), once it has one.
func (n *node) claimOf(ctx context.Context, p *corev1.Pod) *resourceapi.ResourceClaim {
	var name string
	got := n.waitPod(ctx, p.Name, "given its claim", func(p *corev1.Pod) bool {
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
			}
		}
		if p.Status.ExtendedResourceClaimStatus != nil {
			name = p.Status.ExtendedResourceClaimStatus.ResourceClaimName
		}
		return name != ""
	})
	c, err := n.cp.Client.ResourceV1().ResourceClaims(got.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	return c
}

// claimGroup is the time-slice group of the pod's claim: dra-<claim UID>.
func (n *node) claimGroup(p *corev1.Pod) string {
	return "dra-" + string(n.claimOf(context.Background(), p).UID)
}

// allocatedDevice is the device (gpu-<index>) an allocated claim got.
func allocatedDevice(c *resourceapi.ResourceClaim) string {
	if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
		return ""
	}
	return c.Status.Allocation.Devices.Results[0].Device
}

// preparedRe matches the agent's log line for one prepared claim.
var preparedRe = regexp.MustCompile(`"DRA claim prepared".* duration="([^"]+)"`)

// prepareTimes are the agent's Prepare durations, from its log.
func (n *node) prepareTimes() []time.Duration {
	b, err := os.ReadFile(n.agentLog)
	if err != nil {
		n.t.Fatal(err)
	}
	var out []time.Duration
	for _, m := range preparedRe.FindAllStringSubmatch(string(b), -1) {
		if d, err := time.ParseDuration(m[1]); err == nil {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// p99 of sorted durations (the largest below 100 samples).
func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, len(d)*99/100)]
}

// cdiSpecs lists the CDI spec files of the driver's claims.
func (n *node) cdiSpecs() []string {
	ents, _ := os.ReadDir(n.cdiDir)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), harness.DRADriver+"-claim_") {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// allocated waits until the pod's claim is allocated and returns it.
func (n *node) allocated(ctx context.Context, p *corev1.Pod) *resourceapi.ResourceClaim {
	c := n.claimOf(ctx, p)
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		cur, err := n.cp.Client.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err == nil {
			c = cur
		}
		return c.Status.Allocation != nil, nil
	})
	if err != nil {
		n.t.Fatalf("claim %s of pod %s never allocated: %v", c.Name, p.Name, err)
	}
	return c
}

// claimOnNode says what the node holds of a claim: its group, CDI spec and
// checkpoint entry.
func (n *node) claimOnNode(uid string) (group, spec, saved bool) {
	_, err := os.Stat(filepath.Join(n.runDir(), "groups", "dra-"+uid))
	group = err == nil
	spec = slices.Contains(n.cdiSpecs(), harness.DRADriver+"-claim_"+uid+".json")
	if cp, err := checkpoint.Load(draCheckpoint); err == nil {
		_, saved = cp.Claims[uid]
	}
	return group, spec, saved
}

// waitUnprepared waits until the node holds nothing of the claim.
func (n *node) waitUnprepared(ctx context.Context, c *resourceapi.ResourceClaim) {
	var group, spec, saved bool
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		group, spec, saved = n.claimOnNode(string(c.UID))
		return !group && !spec && !saved, nil
	})
	if err != nil {
		n.t.Fatalf("claim %s still on the node after its pod went (group %v, CDI spec %v, checkpoint entry %v): %v", c.Name, group, spec, saved, err)
	}
}

// waitTainted waits until the device has a NoSchedule or NoExecute taint in
// the node's ResourceSlice and returns its taints.
func (n *node) waitTainted(ctx context.Context, device string) []resourceapi.DeviceTaint {
	var taints []resourceapi.DeviceTaint
	n.waitSlice(ctx, device+" tainted", func(devs []resourceapi.Device) bool {
		for _, d := range devs {
			if d.Name == device {
				taints = d.Taints
			}
		}
		return slices.ContainsFunc(taints, func(tn resourceapi.DeviceTaint) bool {
			return tn.Effect == resourceapi.DeviceTaintEffectNoSchedule || tn.Effect == resourceapi.DeviceTaintEffectNoExecute
		})
	})
	return taints
}

// pendingForClaims waits until the scheduler reports the pod unschedulable
// because its claims cannot be allocated, and returns its message.
func (n *node) pendingForClaims(ctx context.Context, pod string) string {
	const want = "cannot allocate all claims"
	msg := n.pending(ctx, pod)
	if !strings.Contains(msg, want) {
		n.t.Errorf("pod %s unschedulable for another reason than its claims (%q): %q", pod, want, msg)
	}
	return msg
}

// waitAgentServing waits until the agent has logged that its DRA plugin
// serves for the n-th time (n-1 restarts), failing at once if it exited.
func (n *node) waitAgentServing(ctx context.Context, times int) {
	err := harness.WaitFor(ctx, 50*time.Millisecond, func() (bool, error) {
		select {
		case <-n.agentDone:
			return false, fmt.Errorf("gpuslice-node exited")
		default:
		}
		b, err := os.ReadFile(n.agentLog)
		return err == nil && strings.Count(string(b), `"DRA kubelet plugin serving"`) >= times, nil
	})
	if err != nil {
		n.t.Fatalf("the agent's DRA plugin not serving (start %d): %v\nagent log:\n%s", times, err, n.agentTail())
	}
}
