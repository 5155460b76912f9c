package agent

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuslice/gpuslice/internal/deviceplugin"
	"github.com/gpuslice/gpuslice/internal/groupmgr"
	"github.com/gpuslice/gpuslice/pkg/api"
)

// TestPendingRecords: the kubelet lists a finishing pod without its devices
// (it dropped them while the pod was briefly inactive); its group, which
// Allocate made, keeps it from being a candidate beside the pod being
// admitted. A container whose gpuslice.io/gpu-units are held and whose group
// is made (one group for both resources) is still waiting for
// gpuslice.io/gpu; a container holding its devices is not.
func TestPendingRecords(t *testing.T) {
	mk := func(name string, res ...corev1.ResourceName) *corev1.Pod {
		lim := corev1.ResourceList{}
		for _, r := range res {
			lim[r] = *resource.NewQuantity(1, resource.DecimalSI)
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{api.AnnotationAssignment: "{}"}},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: lim}}}}}
	}
	finishing, admitting, holding := mk("finishing", api.ResourceGPU), mk("admitting", api.ResourceGPU), mk("holding", api.ResourceGPU)
	both := mk("both", api.ResourceGPU, api.ResourceUnits)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{finishing, admitting, holding, both} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	groups := groupmgr.New(groupmgr.Config{RunDir: t.TempDir()})
	for _, p := range []*corev1.Pod{finishing, holding, both} {
		if err := groups.Tree().Create(deviceplugin.GroupName(deviceplugin.Candidate{Name: p.Name, Container: "main", UID: p.UID})); err != nil {
			t.Fatal(err)
		}
	}
	sock := servePodResources(t, podWith("finishing", string(api.ResourceGPU)), podWith("admitting", string(api.ResourceGPU)),
		podWith("holding", string(api.ResourceGPU), "GPU-1::0"), podWith("both", string(api.ResourceUnits), "GPU-1::7"))
	b := &backend{pods: listersv1.NewPodLister(idx), client: fake.NewClientset(), podSocket: sock, groups: groups}
	cands, err := b.Pending(context.Background(), string(api.ResourceGPU))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cands {
		names = append(names, c.Name)
	}
	if want := []string{"admitting", "both"}; !slices.Equal(names, want) {
		t.Fatalf("candidates %v, want %v", names, want)
	}
	if cands, err := b.Pending(context.Background(), string(api.ResourceUnits)); err != nil || len(cands) != 0 {
		t.Fatalf("units candidates %v, %v; want none (both holds its units)", cands, err)
	}
}

// limitedPods answers List with the kubelet's rate-limit error until it has
// refused refusals calls.
type limitedPods struct {
	podresources.UnimplementedPodResourcesListerServer
	mu       sync.Mutex
	refusals int
	calls    int
}

func (k *limitedPods) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls++
	if k.calls <= k.refusals {
		return nil, status.Error(codes.ResourceExhausted, "rejected by rate limit")
	}
	return &podresources.ListPodResourcesResponse{}, nil
}

// TestListPodResourcesRateLimit: the kubelet's rate limit on pod-resources
// (shared with every other client) is waited out, for a bounded time, with
// waits that double (10 ms ... 200 ms, each in its upper half): a saturated
// limiter is asked a few times a second, not 100 (the kubelet's whole refill,
// which retries every 10 ms took); other errors are not retried. The waits
// are counted, not timed (a recording sleeper).
func TestListPodResourcesRateLimit(t *testing.T) {
	for name, tc := range map[string]struct {
		refusals           int
		minCalls, maxCalls int
		code               codes.Code
		minSlept           time.Duration
	}{
		"free":          {0, 1, 1, codes.OK, 0},
		"limited twice": {2, 3, 3, codes.OK, 15 * time.Millisecond},
		// 5+10+20+40+80 ms, then 100 ms at least each: at most 13 waits
		// (14 calls); 10+20+40+80+160, then 200 ms at most each, and it
		// stops only past 800 ms: at least 8 waits (9 calls).
		"saturated": {1 << 30, 9, 14, codes.ResourceExhausted, listRateWait - listBackoffMax},
	} {
		t.Run(name, func(t *testing.T) {
			k := &limitedPods{refusals: tc.refusals}
			conn, err := grpc.NewClient("unix://"+serveLister(t, k), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			var waits []time.Duration
			sleep := func(_ context.Context, d time.Duration) error {
				waits = append(waits, d)
				return nil
			}
			_, err = listPodResources(context.Background(), podresources.NewPodResourcesListerClient(conn), listRetry{wait: listRateWait, sleep: sleep})
			if status.Code(err) != tc.code {
				t.Fatalf("err %v, want code %v", err, tc.code)
			}
			if k.calls < tc.minCalls || k.calls > tc.maxCalls || len(waits) != k.calls-1 {
				t.Fatalf("%d calls, %d waits; want %d to %d calls, a wait between each two", k.calls, len(waits), tc.minCalls, tc.maxCalls)
			}
			var slept time.Duration
			step := listBackoffFirst
			for i, d := range waits {
				if d < step/2 || d > step {
					t.Errorf("wait %d: %v, want %v to %v", i, d, step/2, step)
				}
				slept += d
				step = min(2*step, listBackoffMax)
			}
			if slept < tc.minSlept || slept > listRateWait {
				t.Errorf("slept %v in all, want %v to %v", slept, tc.minSlept, listRateWait)
			}
		})
	}
}

// TestSleepCtx: the wait between Lists ends with its context.
func TestSleepCtx(t *testing.T) {
	if err := sleepCtx(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("a wait of 1 ms: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sleepCtx(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled wait: %v, want %v", err, context.Canceled)
	}
}
