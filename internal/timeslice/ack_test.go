package timeslice

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/groupstate"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// newGroupsServer is a daemon's group state over the run directory dir, with
// no GPU and no connection.
func newGroupsServer(dir string) *Server {
	return &Server{cfg: Config{RunDir: dir}, tree: group.NewTree(dir), log: klog.Background(), gpus: map[proto.UUID]*gpuState{},
		settings: map[string]group.Settings{}, conns: map[*conn]struct{}{}, bindings: map[string]string{}, ledgers: newElasticLedgers(),
		unapplied: map[string]struct{}{}, generations: map[string]uint64{}, genDirs: map[string]*os.File{}, dirs: map[string]dirID{},
		gone: map[string]time.Time{}, records: map[string]groupRecord{}, seedGiven: map[string]uint32{}, devSeedGiven: map[string]uint64{},
		reprobe: make(chan struct{}, 1), adm: newAdmission()}
}

// TestAcknowledgeInterleaved (issue 34): a group's new settings generation is
// acknowledged whatever the publish goroutine's acknowledgement (retryLimits,
// checkLimits: a member overwrote its limit) does between groupChanged
// opening the group's directory and storing the generation read from it. It
// once found the old generation acknowledged already and closed the new
// directory on its nothing-to-do path: the new generation was never
// acknowledged, and its Bump waiter waited forever.
func TestAcknowledgeInterleaved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		between func(s *Server) // after groupChanged opened the directory
	}{
		{"alone", nil},
		{"publish acknowledges", func(s *Server) { s.applyMemoryLimit(s.log, "g", false) }},
		{"publish acknowledges twice", func(s *Server) {
			s.applyMemoryLimit(s.log, "g", false)
			s.mu.Lock()
			gen := s.generations["g"]
			s.mu.Unlock()
			s.acknowledge(s.log, "g", gen)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := newGroupsServer(t.TempDir())
			if _, err := s.tree.Set("g", []group.Change{{File: group.FileSlice, Value: "10ms"}}); err != nil {
				t.Fatal(err)
			}
			g1, err := s.tree.Bump("g")
			if err != nil {
				t.Fatal(err)
			}
			s.groupChanged(ctx, "g")
			if got, err := s.tree.Applied("g"); err != nil || got != g1 {
				t.Fatalf("first settings: applied %d (%v), want %d", got, err, g1)
			}
			if _, err := s.tree.Set("g", []group.Change{{File: group.FileSlice, Value: "20ms"}}); err != nil {
				t.Fatal(err)
			}
			g2, err := s.tree.Bump("g")
			if err != nil {
				t.Fatal(err)
			}
			if tc.between != nil {
				s.hooks.genDirOpened = func(string) { tc.between(s) }
			}
			s.groupChanged(ctx, "g")
			if got, err := s.tree.Applied("g"); err != nil || got != g2 {
				t.Fatalf("new settings: applied %d (%v), want %d (the first settings: %d)", got, err, g2, g1)
			}
			s.mu.Lock()
			d := s.genDirs["g"]
			s.mu.Unlock()
			if d != nil {
				t.Errorf("the directory stays open once its generation %d is acknowledged", g2)
			}
		})
	}
}

// TestAcknowledgeOnlyWhatWasApplied (issue 38): the publish goroutine's
// limit write (checkLimits, retryLimits) that read a group's settings just
// before the group was removed and made again under its name acknowledged
// the new group's generation with the removed group's limit: its
// acknowledgement read the generation when it wrote it, not with the
// settings. The groups manager's Create then returned with the old limit in
// the new state file (TestRemadeGroupApplied: 'ctr, made for the 19. time:
// limit 554696704 in its state file, want 555745280', at load 66).
func TestAcknowledgeOnlyWhatWasApplied(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newGroupsServer(dir)
	makeGroup := func(limit string) uint64 {
		t.Helper()
		if _, err := s.tree.Set("g", []group.Change{{File: group.FileMemoryMax, Value: limit}}); err != nil {
			t.Fatal(err)
		}
		if err := groupstate.Create("/proc", groupstate.Path(dir, "g"), "g"); err != nil {
			t.Fatal(err)
		}
		gen, err := s.tree.Bump("g")
		if err != nil {
			t.Fatal(err)
		}
		return gen
	}
	makeGroup("1GiB")
	s.groupChanged(ctx, "g")
	var gen2 uint64
	calls := 0
	release, remade := make(chan struct{}), make(chan struct{})
	s.hooks.limitRead = func(string) {
		calls++
		switch calls {
		case 1: // the publisher has read the settings: the group is made again meanwhile
			if err := s.tree.Remove("g"); err != nil {
				t.Error(err)
			}
			gen2 = makeGroup("2GiB")
			go func() { defer close(remade); s.groupChanged(ctx, "g") }()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				s.mu.Lock()
				stored := s.generations["g"] == gen2
				s.mu.Unlock()
				if stored {
					break
				}
				if time.Now().After(deadline) {
					t.Error("the new group's generation not stored in 10 s")
					return
				}
			}
		case 2: // the new group's own apply: held until the publisher's is checked
			<-release
		}
	}
	s.applyMemoryLimit(s.log, "g", false)
	applied, _ := s.tree.Applied("g")
	limit, _, _ := groupstate.HeaderLimit(groupstate.Path(dir, "g"))
	if applied == gen2 && limit != 2<<30 {
		t.Errorf("generation %d of the new group acknowledged with limit %d in its state file, want %d", gen2, limit, 2<<30)
	}
	close(release)
	<-remade
	applied, _ = s.tree.Applied("g")
	limit, _, _ = groupstate.HeaderLimit(groupstate.Path(dir, "g"))
	if applied != gen2 || limit != 2<<30 {
		t.Errorf("after the new group's apply: generation %d acknowledged (want %d), limit %d (want %d)", applied, gen2, limit, 2<<30)
	}
}
