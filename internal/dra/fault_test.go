package dra

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuslice/gpuslice/internal/dra/checkpoint"
	"github.com/gpuslice/gpuslice/internal/gpucdi"
)

const (
	uidKept  = "0b9c3f2e-0000-4000-8000-0000000000aa" // prepared before, untouched by the crash
	uidFault = "0b9c3f2e-0000-4000-8000-0000000000bb" // the claim whose call crashes
)

var prepareSteps = []Step{StepPrepareStarted, StepGroupCreated, StepSpecWritten, StepPrepareCompleted}

// onNode is what the node holds of the driver's claims: group, CDI spec and
// checkpoint entry (with its state) by claim UID.
type onNode struct {
	groups, specs []string
	entries       map[string]checkpoint.State
}

func (e env) onNode(t *testing.T) onNode {
	t.Helper()
	var n onNode
	groups, err := e.mgr.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if uid, ok := strings.CutPrefix(g, groupPrefix); ok {
			n.groups = append(n.groups, uid)
		}
	}
	if n.specs, err = gpucdi.ClaimSpecs(e.cdi); err != nil {
		t.Fatal(err)
	}
	slices.Sort(n.specs)
	ck, err := checkpoint.Load(e.ckpt)
	if err != nil {
		t.Fatal(err)
	}
	n.entries = map[string]checkpoint.State{}
	for uid, c := range ck.Claims {
		n.entries[uid] = c.State
	}
	return n
}

// want: exactly these claims, each with one group, spec and completed entry.
func (n onNode) want(t *testing.T, when string, uids ...string) {
	t.Helper()
	slices.Sort(uids)
	want := map[string]checkpoint.State{}
	for _, u := range uids {
		want[u] = checkpoint.PrepareCompleted
	}
	if !slices.Equal(n.groups, uids) || !slices.Equal(n.specs, uids) || fmt.Sprint(n.entries) != fmt.Sprint(want) {
		t.Fatalf("%s: groups %v, CDI specs %v, checkpoint %v; want exactly %v, each prepared", when, n.groups, n.specs, n.entries, uids)
	}
}

// TestFaultAtEveryStep: a step that fails (Config.Fault) fails the call and
// leaves nothing half done: a failed Prepare nothing of the claim, a failed
// Unprepare the claim recorded UnprepareStarted or gone; the kubelet's retry
// then prepares the claim once, or removes it.
func TestFaultAtEveryStep(t *testing.T) {
	ctx := context.Background()
	for _, step := range Steps() {
		t.Run(string(step), func(t *testing.T) {
			e := newEnv(t)
			d, err := New(ctx, e.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Prepare(ctx, claim(uidKept, 25, gib)); err != nil {
				t.Fatal(err)
			}
			c := claim(uidFault, 50, 2*gib)
			isPrepare := slices.Contains(prepareSteps, step)
			if !isPrepare {
				if _, err := d.Prepare(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			hit := false
			d.cfg.Fault = func(s Step) error {
				if s == step && !hit {
					hit = true
					return errors.New("injected")
				}
				return nil
			}
			if isPrepare {
				_, err = d.Prepare(ctx, c)
			} else {
				err = d.Unprepare(ctx, c.UID)
			}
			if !hit || err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("step reached %v, call error %v", hit, err)
			}
			n := e.onNode(t)
			if isPrepare {
				n.want(t, "after the failed Prepare", uidKept)
				if _, err := d.Prepare(ctx, c); err != nil {
					t.Fatal(err)
				}
				e.onNode(t).want(t, "after the retried Prepare", uidKept, uidFault)
				return
			}
			if st, ok := n.entries[uidFault]; ok && st != checkpoint.UnprepareStarted {
				t.Fatalf("a failed Unprepare left the claim %s", st)
			}
			if err := d.Unprepare(ctx, c.UID); err != nil {
				t.Fatal(err)
			}
			e.onNode(t).want(t, "after the retried Unprepare", uidKept)
		})
	}
}

// crashEnv names the child's step; the child prepares or unprepares
// uidFault in the directory crashDirEnv and is SIGKILLed at the step.
const (
	crashEnv    = "GPUSLICE_TEST_DRA_CRASH_STEP"
	crashDirEnv = "GPUSLICE_TEST_DRA_CRASH_DIR"
)

// TestCrashAtEveryStep: the driver's process is killed (SIGKILL) at each
// step of Prepare and Unprepare; a new driver on the same node (groups,
// daemon, CDI directory, checkpoint) leaves no group, CDI spec or checkpoint
// entry that no prepared claim owns, keeps the claim prepared before, and
// the kubelet's retry ends with the claim prepared once (Prepare) or gone
// (Unprepare).
func TestCrashAtEveryStep(t *testing.T) {
	if step := os.Getenv(crashEnv); step != "" {
		crashChild(t, Step(step), os.Getenv(crashDirEnv))
		return
	}
	ctx := context.Background()
	for _, step := range Steps() {
		t.Run(string(step), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "run"), 0o755); err != nil {
				t.Fatal(err)
			}
			startDaemon(t, filepath.Join(dir, "run"))
			e := envAt(dir)
			d, err := New(ctx, e.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Prepare(ctx, claim(uidKept, 25, gib)); err != nil {
				t.Fatal(err)
			}
			isPrepare := slices.Contains(prepareSteps, step)
			if !isPrepare {
				if _, err := d.Prepare(ctx, claim(uidFault, 50, 2*gib)); err != nil {
					t.Fatal(err)
				}
			}
			// The agent is killed at step.
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAtEveryStep$")
			cmd.Env = append(os.Environ(), crashEnv+"="+string(step), crashDirEnv+"="+dir)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the driver was not killed at %s: %v\n%s", step, err, out)
			}
			// Restarted: nothing half done, nothing no claim owns.
			d, err = New(ctx, e.cfg)
			if err != nil {
				t.Fatal(err)
			}
			n := e.onNode(t)
			if isPrepare {
				if step == StepPrepareCompleted {
					n.want(t, "after the restart", uidKept, uidFault) // recorded prepared before the kill
				} else {
					n.want(t, "after the restart", uidKept)
				}
				// The kubelet got no answer and retries.
				if _, err := d.Prepare(ctx, claim(uidFault, 50, 2*gib)); err != nil {
					t.Fatal(err)
				}
				e.onNode(t).want(t, "after the retried Prepare", uidKept, uidFault)
				s, err := e.mgr.Tree().Read(GroupName(uidFault))
				if err != nil || s.Share != 0.5 || s.MemoryMax != uint64(2*gib) {
					t.Fatalf("the retried claim's group: %+v %v", s, err)
				}
				return
			}
			if _, ok := n.entries[uidFault]; ok {
				t.Fatalf("after the restart the half unprepared claim is still there: %+v", n)
			}
			n.want(t, "after the restart", uidKept)
			if err := d.Unprepare(ctx, types.UID(uidFault)); err != nil {
				t.Fatal(err)
			}
			e.onNode(t).want(t, "after the retried Unprepare", uidKept)
		})
	}
}

// crashChild is the driver killed at step: SIGKILL, no deferred cleanup.
func crashChild(t *testing.T, step Step, dir string) {
	e := envAt(dir)
	e.cfg.Fault = func(s Step) error {
		if s == step {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return nil
	}
	ctx := context.Background()
	d, err := New(ctx, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(prepareSteps, step) {
		_, err = d.Prepare(ctx, claim(uidFault, 50, 2*gib))
	} else {
		err = d.Unprepare(ctx, types.UID(uidFault))
	}
	t.Fatalf("step %s not reached (call error %v)", step, err)
}
