package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SchedulerOptions describe one scheduler profile.
type SchedulerOptions struct {
	// SchedulerName is the profile's name; pods select it by spec.schedulerName.
	SchedulerName string
	// GPUSlice enables the plugin with Args (YAML/JSON object body, may be
	// empty) and makes NodeResourcesFit ignore the gpuslice.io resources.
	GPUSlice bool
	Args     string
	// StockQueueSort keeps kube-scheduler's PrioritySort instead of
	// GPUSliceQueueSort (for figures before and after; GPUSlice only).
	StockQueueSort bool
	// StockDRA keeps kube-scheduler's DynamicResources plugin as it is
	// instead of GPUSliceDynamicResources (the same plugin shown the devices
	// in placement order; GPUSlice only): device placement by first fit.
	StockDRA bool
	// Parallelism of the scheduling framework (0: default 16).
	Parallelism int
	// Lease, when set, turns leader election on with this Lease in
	// LeaseNamespace (short durations: a killed leader is replaced in ~3 s).
	Lease, LeaseNamespace string
	// ExtraArgs are appended to the command line (they override the
	// defaults, e.g. --secure-port for profiling).
	ExtraArgs []string
}

// SchedulerConfig renders a KubeSchedulerConfiguration.
func SchedulerConfig(kubeconfig string, o SchedulerOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
	fmt.Fprintf(&b, "clientConnection: {kubeconfig: %q, qps: 5000, burst: 10000}\n", kubeconfig)
	if o.Lease != "" {
		fmt.Fprintf(&b, "leaderElection: {leaderElect: true, resourceLock: leases, resourceName: %s, resourceNamespace: %s, "+
			"leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 500ms}\n", o.Lease, o.LeaseNamespace)
	} else {
		fmt.Fprintf(&b, "leaderElection: {leaderElect: false}\n")
	}
	if o.Parallelism > 0 {
		fmt.Fprintf(&b, "parallelism: %d\n", o.Parallelism)
	}
	fmt.Fprintf(&b, "profiles:\n- schedulerName: %s\n", o.SchedulerName)
	if o.GPUSlice {
		args := o.Args
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		fmt.Fprintf(&b, "  plugins:\n    multiPoint:\n      enabled:\n")
		if !o.StockDRA {
			// DynamicResources with the devices offered in placement order
			// (and busy GPUs hidden); before GPUSlice, whose PreFilter reads
			// the allocated state it gathered.
			fmt.Fprintf(&b, "      - {name: GPUSliceDynamicResources, weight: 2}\n")
		}
		fmt.Fprintf(&b, "      - {name: GPUSlice, weight: 10}\n")
		if !o.StockDRA {
			fmt.Fprintf(&b, "      disabled: [{name: DynamicResources}]\n")
		}
		if !o.StockQueueSort {
			// Preemptors back from their preemption before fresh pods of equal priority.
			fmt.Fprintf(&b, "    queueSort:\n      disabled: [{name: PrioritySort}]\n      enabled: [{name: GPUSliceQueueSort}]\n")
		}
		// GPUSlice binds GPU pods (with their assignment), DefaultBinder the rest.
		fmt.Fprintf(&b, "    bind:\n      disabled: [{name: DefaultBinder}]\n      enabled: [{name: GPUSlice}, {name: DefaultBinder}]\n")
		// GPUSlice preempts for GPU pods (the fewest victims on one GPU, PDBs
		// respected), DefaultPreemption for the rest.
		fmt.Fprintf(&b, "    postFilter:\n      disabled: [{name: DefaultPreemption}]\n      enabled: [{name: GPUSlice}, {name: DefaultPreemption}]\n")
		fmt.Fprintf(&b, "  pluginConfig:\n  - name: GPUSlice\n    args: %s\n", args)
		fmt.Fprintf(&b, "  - name: NodeResourcesFit\n    args: {ignoredResourceGroups: [gpuslice.io]}\n")
	}
	return b.String()
}

// StartScheduler writes the configuration and starts bin (kube-scheduler or
// gpuslice-scheduler) against the control plane, without serving HTTPS.
func (cp *ControlPlane) StartScheduler(ctx context.Context, bin, logName string, o SchedulerOptions) (*Process, error) {
	cfgPath := filepath.Join(cp.Dir, logName+".yaml")
	if err := os.WriteFile(cfgPath, []byte(SchedulerConfig(cp.Kubeconfig, o)), 0o600); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	args := append([]string{"--config", cfgPath, "--secure-port", "0", "-v", "1"}, o.ExtraArgs...)
	return Start(cp.Dir, logName, bin, args...)
}

// StartKwok starts KWOK managing the nodes annotated kwok.x-k8s.io/node=fake.
func (cp *ControlPlane) StartKwok(bins Binaries) (*Process, error) {
	return Start(cp.Dir, "kwok", bins.Path("kwok"), "--kubeconfig", cp.Kubeconfig,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		"--config", bins.Path("kwok-stages.yaml"), "--node-ip", "127.0.0.1")
}
