package timeslice

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpuslice/gpuslice/internal/group"
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
			s.acknowledge(s.log, "g")
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
