package sched

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policy "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"

	"github.com/gpuslice/gpuslice/internal/alloc"
)

// preemptor preempts for GPU pods with kube-scheduler's own preemption
// machinery (preemption.Evaluator: the nodes tried, the choice among them,
// eviction with the DisruptionTarget condition, nomination, asynchronous
// eviction) and its own victims (preemption.Interface): on each node the
// fewest lower-priority pods that free enough on one GPU (alloc.Victims),
// never one whose eviction a PodDisruptionBudget forbids.
type preemptor struct {
	fh    fwk.Handle
	alloc Allocator
	ev    *preemption.Evaluator
	exec  *preemption.Executor
	// rec holds each preemptor's victims until the books release them.
	rec *preempted
	// dra: the DRA path's view of claims and devices (nil: no DRA);
	// release deallocates its victims' claims once they are gone.
	dra     *draEnv
	release *claimReleaser
	// backfill: the nodes reserved for pods waiting for whole devices.
	backfill *reservations
	// flights: claim bindings in flight, and the pods refused meanwhile.
	flights *draFlights
	// floors: the DRA shortlist's lowest claim pod priority per node.
	floors claimFloors
}

// victimWait bounds how long a preemptor waits for its victims to leave
// the books before it may preempt again.
const victimWait = 30 * time.Second

var _ preemption.Interface = &preemptor{}

// Candidate nodes tried per preemption, as DefaultPreemption's defaults:
// 10 % of the nodes, at least 100.
const (
	minCandidatePercent  = 10
	minCandidateAbsolute = 100
)

func newPreemptor(fh fwk.Handle, a Allocator) *preemptor {
	pr := &preemptor{fh: fh, alloc: a, rec: newPreempted(victimWait)}
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	if fts.EnableDynamicResourceAllocation {
		pr.dra = newDRAEnv(fh, fts)
		pr.release = newClaimReleaser(fh.ClientSet(), fh, 2*victimWait)
		pr.backfill = newReservations()
		if m := fh.SharedDRAManager(); m != nil {
			claims := m.ResourceClaims()
			pr.release.cached, pr.release.assume = claims.Get, assumeReleased(claims, pr.dra)
			pr.flights = newDRAFlights(&waiters{activator: fh}, func(uid types.UID) bool { return claims.GetPendingAllocation(uid) != nil })
		}
	}
	pr.exec = preemption.NewExecutor(fh, fts)
	pr.ev = preemption.NewEvaluator(Name, fh, pr, pr.exec)
	return pr
}

// assumeReleased puts a claim the releaser deallocated into the tracker
// and records the change on the pools it was allocated on (claimChanges):
// the ledger (draledger.go) reads them again, as the tracker now has them,
// before the informer's event comes.
func assumeReleased(claims fwk.ResourceClaimTracker, e *draEnv) func(*resourceapi.ResourceClaim) error {
	return func(c *resourceapi.ResourceClaim) error {
		old, _ := claims.Get(c.Namespace, c.Name)
		err := claims.AssumeClaimAfterAPICall(c)
		if e != nil {
			e.changes.touchAllocated(old)
		}
		return err
	}
}

// GetOffsetAndNumCandidates implements preemption.Interface.
func (pr *preemptor) GetOffsetAndNumCandidates(n int32) (int32, int32) {
	if n <= 0 {
		return 0, 0
	}
	k := max(n*minCandidatePercent/100, minCandidateAbsolute)
	return rand.Int32N(n), min(k, n)
}

// CandidatesToVictimsMap implements preemption.Interface.
func (pr *preemptor) CandidatesToVictimsMap(cs []preemption.Candidate) map[string]*extenderv1.Victims {
	m := make(map[string]*extenderv1.Victims, len(cs))
	for _, c := range cs {
		m[c.Name()] = c.Victims()
	}
	return m
}

// PodEligibleToPreemptOthers implements preemption.Interface, as
// DefaultPreemption: not with preemptionPolicy Never, nor while pods it
// preempted on its nominated node are still terminating.
func (pr *preemptor) PodEligibleToPreemptOthers(_ context.Context, pod *corev1.Pod, nominated *fwk.Status) (bool, string) {
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return false, "not eligible due to preemptionPolicy=Never."
	}
	if pr.rec.waiting(pod.UID, time.Now(), pr.holds) {
		return false, "not eligible: the pods it preempted still hold their GPUs."
	}
	nom := pod.Status.NominatedNodeName
	if nom == "" || nominated.Code() == fwk.UnschedulableAndUnresolvable {
		return true, ""
	}
	ni, _ := pr.fh.SnapshotSharedLister().NodeInfos().Get(nom)
	if ni == nil {
		return true, ""
	}
	prio := corev1helpers.PodPriority(pod)
	for _, pi := range ni.GetPods() {
		if p := pi.GetPod(); corev1helpers.PodPriority(p) < prio && preemption.PodTerminatingByPreemption(p) {
			return false, "not eligible due to a terminating pod on the nominated node."
		}
	}
	return true, ""
}

// OrderedScoreFuncs implements preemption.Interface: the default choice
// among nodes (fewest PDB violations, lowest highest priority, lowest sum,
// fewest victims, latest start).
func (pr *preemptor) OrderedScoreFuncs(context.Context, map[string]*extenderv1.Victims) []func(string) int64 {
	return nil
}

// SelectVictimsOnNode implements preemption.Interface. The lower-priority
// pods on the node that PodDisruptionBudgets allow to evict are taken off
// (every plugin's RemovePod); if the pod then fits, each is put back unless
// the pod stops fitting: first those that hold none of the GPUs alloc.Victims
// chose, then the chosen ones, most important first. What could not be put
// back is the victims: for GPU capacity, the fewest pods on one GPU.
func (pr *preemptor) SelectVictimsOnNode(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo,
	all []*preemption.DomainVictim, pdbs []*policy.PodDisruptionBudget) ([]*corev1.Pod, int, *fwk.Status) {
	node := ni.Node().Name
	prio := corev1helpers.PodPriority(pod)
	var potential []*preemption.DomainVictim
	for _, v := range all {
		if v.Priority() < prio && onlyOn(v, node) {
			potential = append(potential, v)
		}
	}
	if len(potential) == 0 {
		return nil, 0, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "no lower-priority pods to preempt")
	}
	// Least important first: the budgets PDBs allow go to the pods evicted first.
	sort.SliceStable(potential, func(i, j int) bool { return preemption.MoreImportantVictim(potential[j], potential[i]) })
	violating, allowed := preemption.FilterVictimsWithPDBViolation(potential, pdbs)
	protected := pdbNames(violating, pdbs)
	if len(allowed) == 0 {
		return nil, 0, fwk.NewStatus(fwk.Unschedulable, "the lower-priority pods here are protected by "+protected)
	}
	if c, ok := readCycle(state); ok && c.dra {
		return pr.selectDRAVictims(ctx, state, pod, ni, allowed, protected)
	}
	chosen := pr.gpuVictims(state, node, allowed)
	for _, v := range allowed {
		if err := pr.move(ctx, state, pod, ni, v, false); err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
	}
	if st := pr.fh.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni); !st.IsSuccess() {
		if protected != "" && st.IsRejected() {
			return nil, 0, fwk.NewStatus(fwk.Unschedulable, "evicting enough lower-priority pods would violate "+protected)
		}
		return nil, 0, st
	}
	// Reprieve order: not chosen first, then chosen; most important first.
	order := slices.Clone(allowed)
	slices.Reverse(order)
	sort.SliceStable(order, func(i, j int) bool { return !chosen[order[i]] && chosen[order[j]] })
	order, err := pr.reprieveUnchosen(ctx, state, pod, ni, order, chosen)
	if err != nil {
		return nil, 0, fwk.AsStatus(err)
	}
	var victims []*preemption.DomainVictim
	for _, v := range order {
		if err := pr.move(ctx, state, pod, ni, v, true); err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
		if pr.fh.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni).IsSuccess() {
			continue
		}
		if err := pr.move(ctx, state, pod, ni, v, false); err != nil {
			return nil, 0, fwk.AsStatus(err)
		}
		victims = append(victims, v)
	}
	sort.SliceStable(victims, func(i, j int) bool { return preemption.MoreImportantVictim(victims[i], victims[j]) })
	return pr.chose(pod, node, victims), 0, nil
}

// chose records the victims a dry run chose for pod on node and returns
// their pods.
func (pr *preemptor) chose(pod *corev1.Pod, node string, victims []*preemption.DomainVictim) []*corev1.Pod {
	var out []*corev1.Pod
	var uids []string
	for _, v := range victims {
		for _, pi := range v.Pods() {
			out = append(out, pi.GetPod())
			uids = append(uids, string(pi.GetPod().UID))
		}
	}
	pr.rec.chose(pod.UID, node, uids)
	return out
}

// reprieveUnchosen puts back at once every pod alloc.Victims did not choose;
// if the pod still fits, only the chosen remain to be tried one by one (one
// filter pass instead of one per pod), else all of them are taken off again
// and order is returned whole.
func (pr *preemptor) reprieveUnchosen(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo,
	order []*preemption.DomainVictim, chosen map[*preemption.DomainVictim]bool) ([]*preemption.DomainVictim, error) {
	var rest, picked []*preemption.DomainVictim
	for _, v := range order {
		if chosen[v] {
			picked = append(picked, v)
		} else {
			rest = append(rest, v)
		}
	}
	if len(picked) == 0 || len(rest) == 0 {
		return order, nil
	}
	for _, v := range rest {
		if err := pr.move(ctx, state, pod, ni, v, true); err != nil {
			return nil, err
		}
	}
	if pr.fh.RunFilterPluginsWithNominatedPods(ctx, state, pod, ni).IsSuccess() {
		return picked, nil
	}
	for _, v := range rest {
		if err := pr.move(ctx, state, pod, ni, v, false); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// gpuVictims marks the victims alloc.Victims chooses for the pod's GPU
// request among allowed (none for a pod without one, or when no choice
// frees enough: the reprieve pass then decides alone).
func (pr *preemptor) gpuVictims(state fwk.CycleState, node string, allowed []*preemption.DomainVictim) map[*preemption.DomainVictim]bool {
	c, ok := readCycle(state)
	if !ok {
		return nil
	}
	var cands []alloc.Victim
	owner := map[string]*preemption.DomainVictim{}
	for _, v := range allowed {
		for _, pi := range v.Pods() {
			uid := string(pi.GetPod().UID)
			cands = append(cands, alloc.Victim{UID: uid, Priority: v.Priority()})
			owner[uid] = v
		}
	}
	uids, err := pr.alloc.Victims(node, c.req, c.over[node], cands)
	if err != nil {
		return nil
	}
	out := map[*preemption.DomainVictim]bool{}
	for _, u := range uids {
		out[owner[u]] = true
	}
	return out
}

// move takes a victim's pods off the node (back false) or puts them back,
// in the node's copy and through every plugin's PreFilter extensions.
func (pr *preemptor) move(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo, v *preemption.DomainVictim, back bool) error {
	for _, pi := range v.Pods() {
		var st *fwk.Status
		if back {
			ni.AddPodInfo(pi)
			st = pr.fh.RunPreFilterExtensionAddPod(ctx, state, pod, pi, ni)
		} else {
			if err := ni.RemovePod(klog.FromContext(ctx), pi.GetPod()); err != nil {
				return err
			}
			st = pr.fh.RunPreFilterExtensionRemovePod(ctx, state, pod, pi, ni)
		}
		if !st.IsSuccess() {
			return st.AsError()
		}
	}
	return nil
}

// onlyOn reports whether all of a victim's pods run on node (a pod group
// spanning nodes is not preempted for a GPU pod).
func onlyOn(v *preemption.DomainVictim, node string) bool {
	for _, pi := range v.Pods() {
		if pi.GetPod().Spec.NodeName != node {
			return false
		}
	}
	return true
}

// pdbNames names the PodDisruptionBudgets that protect the violating victims.
func pdbNames(violating []preemption.ViolatingVictim[*preemption.DomainVictim], pdbs []*policy.PodDisruptionBudget) string {
	var names []string
	for _, vv := range violating {
		for _, pi := range vv.Victim.Pods() {
			p := pi.GetPod()
			for _, pdb := range pdbs {
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if pdb.Namespace != p.Namespace || err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
					continue
				}
				if n := pdb.Namespace + "/" + pdb.Name; !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	what := "PodDisruptionBudget"
	if len(names) > 1 {
		what += "s"
	}
	return fmt.Sprintf("%s %s", what, strings.Join(names, ", "))
}
