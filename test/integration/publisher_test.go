//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuslice/gpuslice/internal/gpunoderow"
	"github.com/gpuslice/gpuslice/internal/testbin"
	"github.com/gpuslice/gpuslice/pkg/api"
	"github.com/gpuslice/gpuslice/pkg/apis/gpuslice/v1alpha2"
	"github.com/gpuslice/gpuslice/test/integration/harness"
)

type fixedGPUs []gpunoderow.Device

func (f fixedGPUs) Devices(context.Context) ([]gpunoderow.Device, error) { return f, nil }

type noHoldings struct{}

func (noHoldings) Held(context.Context) (map[int32]gpunoderow.Held, error) { return nil, nil }

// TestPublisherConcurrentWritersLoseNothing: several publishers of one row
// and a concurrent label writer; every write lands (a watch of the row sees
// each publication's distinct heartbeat), no label is lost, and the status is
// never torn.
func TestPublisherConcurrentWritersLoseNothing(t *testing.T) {
	e, ns := setup(t)
	node := ns + "-pub"
	const writers, rounds, labels = 4, 20, 30
	ctx := context.Background()
	rows, err := e.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Stop()
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- publishRounds(ctx, e, node, w, writers, rounds)
		}(w)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- addLabels(ctx, e, node, labels)
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	g, err := e.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every publication changed the status (distinct heartbeats): the watch
	// sees one heartbeat per publication.
	if got, want := heartbeatsSeen(t, rows, g.ResourceVersion), writers*rounds; got != want {
		t.Fatalf("%d heartbeats published, want %d (one per publication): a write was lost", got, want)
	}
	if n := len(g.Labels); n != labels {
		t.Fatalf("%d labels survived, want %d", n, labels)
	}
	w := len(g.Status.GPUs) - 1
	for i, gpu := range g.Status.GPUs {
		if gpu.UUID != fmt.Sprintf("GPU-%d-%d", w, i) {
			t.Fatalf("torn status: %+v", g.Status.GPUs)
		}
	}
	if !apiequality.Semantic.DeepEqual(g.Status.Summary, v1alpha2.Summarize(g.Status.GPUs)) {
		t.Fatalf("summary %+v does not match GPUs", g.Status.Summary)
	}
}

// heartbeatsSeen counts the distinct status heartbeats in w's events up to
// the one of resourceVersion last.
func heartbeatsSeen(t *testing.T, w watch.Interface, last string) int {
	seen := map[string]bool{}
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch of the row ended early")
			}
			g, isObj := ev.Object.(*v1alpha2.GPUNode)
			if !isObj {
				t.Fatalf("watch event %s: %v", ev.Type, ev.Object)
			}
			if hb := g.Status.UpdateTime; !hb.IsZero() {
				seen[hb.UTC().Format(time.RFC3339)] = true
			}
			if g.ResourceVersion == last {
				return len(seen)
			}
		case <-timeout:
			t.Fatalf("watch never reached resourceVersion %s (%d heartbeats seen)", last, len(seen))
		}
	}
}

// publishRounds is writer w of n: it publishes w+1 GPUs (a torn write would
// mix writers' GPU lists) rounds times, each with a distinct heartbeat.
func publishRounds(ctx context.Context, e *env, node string, w, n, rounds int) error {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	gpus := make(fixedGPUs, w+1)
	for i := range gpus {
		gpus[i] = gpunoderow.Device{Index: int32(i), UUID: fmt.Sprintf("GPU-%d-%d", w, i), Model: "m", MemoryBytes: 1 << 30, Healthy: true}
	}
	p := &gpunoderow.Publisher{Client: e.cp.GPUNodes, Node: node, GPUs: gpus, Held: noHoldings{}, Clock: clk, Period: time.Second}
	for r := 0; r < rounds; r++ {
		gpus[0].UtilizationPercent = int32(r) // each publication a change: the status is written only then
		clk.SetTime(t0.Add(time.Duration(r*n+w+1) * time.Second))
		if err := p.PublishOnce(ctx); err != nil {
			return err
		}
	}
	return nil
}

// addLabels adds labels to the row one by one, each a read-modify-write
// conditioned on the resourceVersion, as another controller would.
func addLabels(ctx context.Context, e *env, node string, labels int) error {
	rc := e.cp.GPUNodes.GpusliceV1alpha2().GPUNodes()
	backoff := wait.Backoff{Steps: 30, Duration: 5 * time.Millisecond, Factor: 1.3, Jitter: 1, Cap: time.Second}
	for i := 0; i < labels; i++ {
		err := retry.RetryOnConflict(backoff, func() error {
			cur, err := rc.Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels[fmt.Sprintf("l%d", i)] = "x"
			_, err = rc.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if isNotFound(err) { // the row does not exist yet
			i--
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestPublisherWritesOnlyOnChange: over 30 publications of an unchanged node
// the API server sees no write of its GPUNode (its resourceVersion stays) and
// one renewal of its Lease per publication; a change is written at once.
func TestPublisherWritesOnlyOnChange(t *testing.T) {
	e, ns := setup(t)
	node := ns + "-quiet"
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(t0)
	gpus := fixedGPUs{{Index: 0, UUID: "GPU-q", Model: "m", MemoryBytes: 80 * harness.GiB, Healthy: true}}
	p := &gpunoderow.Publisher{Client: e.cp.GPUNodes, Leases: e.cp.Client.CoordinationV1(), Node: node, GPUs: gpus,
		Held: noHoldings{}, Clock: clk, Period: 10 * time.Second}
	rows := e.cp.GPUNodes.GpusliceV1alpha2().GPUNodes()
	leases := e.cp.Client.CoordinationV1().Leases(api.LeaseNamespace)
	if err := p.PublishOnce(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := rows.Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaseRVs := map[string]bool{}
	const beats = 30
	for i := 1; i <= beats; i++ {
		clk.SetTime(t0.Add(time.Duration(i) * 10 * time.Second))
		if err := p.PublishOnce(ctx); err != nil {
			t.Fatal(err)
		}
		le, err := leases.Get(ctx, api.LeaseName(node), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		leaseRVs[le.ResourceVersion] = true
		if !le.Spec.RenewTime.Equal(ptrMicro(clk.Now())) || *le.Spec.HolderIdentity != node {
			t.Fatalf("publication %d: Lease %+v", i, le.Spec)
		}
	}
	now, err := rows.Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != first.ResourceVersion || len(leaseRVs) != beats {
		t.Fatalf("over %d unchanged publications: GPUNode resourceVersion %s -> %s, %d Lease writes (want unchanged, %d)",
			beats, first.ResourceVersion, now.ResourceVersion, len(leaseRVs), beats)
	}
	gpus[0].UtilizationPercent = 40
	if err := p.PublishOnce(ctx); err != nil {
		t.Fatal(err)
	}
	changed, err := rows.Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if changed.ResourceVersion == first.ResourceVersion || changed.Status.GPUs[0].UtilizationPercent != 40 || !changed.Status.UpdateTime.Time.Equal(clk.Now()) {
		t.Fatalf("a change was not written: %+v", changed.Status)
	}
	t.Logf("GPUNode writes over %d unchanged publications: 0; Lease writes: %d", beats, len(leaseRVs))
}

func ptrMicro(t time.Time) *metav1.MicroTime { m := metav1.NewMicroTime(t); return &m }

// TestPublisherOnSimulatedGPU runs gpuslice-publisher against the simulated
// GPU's NVML, schedules a pod on the row it wrote, and sees the holding in
// the next publication.
func TestPublisherOnSimulatedGPU(t *testing.T) {
	e, ns := setup(t)
	pub := os.Getenv("GPUSLICE_PUBLISHER")
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	simDir := filepath.Join(root, "bin", "sim")
	if _, err := os.Stat(filepath.Join(simDir, "libnvidia-ml.so.1")); err != nil || pub == "" {
		testbin.Missing(t, "needs GPUSLICE_PUBLISHER and the simulated GPU in bin/sim (make all)")
	}
	node := ns + "-sim"
	spec := harness.NodeSpec{Name: node, Labels: map[string]string{groupLabel: ns}, Extended: true} // Node only; the publisher writes the row
	if err := e.cp.CreateNode(context.Background(), spec, time.Now()); err != nil {
		t.Fatal(err)
	}
	publish := func() *v1alpha2.GPUNode {
		cmd := exec.Command(pub, "--once", "--driver", "sim", "--sim-dir", simDir, "--node", node, "--kubeconfig", e.cp.Kubeconfig)
		cmd.Env = append(os.Environ(), "GPUSLICE_SIM_GPUS=2", "GPUSLICE_SIM_MEMORY=80GiB", "GPUSLICE_SIM_STATE="+filepath.Join(t.TempDir(), "sim"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("publisher: %v\n%s", err, out)
		}
		g, err := e.cp.GPUNodes.GpusliceV1alpha2().GPUNodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := publish()
	if len(g.Status.GPUs) != 2 || g.Status.GPUs[0].Memory.Value() != 80*harness.GiB || g.Status.State != v1alpha2.NodeWorking || g.Status.Summary.UnitsFree != 200 {
		t.Fatalf("published %+v", g.Status)
	}
	sched := ns + "-sched"
	e.startScheduler(t, sched, "")
	e.createPod(t, ns, "p", sched, harness.GPURequest{Units: 25, Memory: 10 * harness.GiB})
	e.waitBound(t, ns, "p")
	g = publish()
	if g.Status.Summary.UnitsFree != 175 || g.Status.Summary.MemoryFree.Value() != 150*harness.GiB {
		t.Fatalf("after scheduling: summary %+v", g.Status.Summary)
	}
}
