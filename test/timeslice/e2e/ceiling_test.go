//go:build timeslicee2e

package timeslicee2e

import (
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
)

// A group held back by its ceiling does not get a fresh budget by leaving
// the GPU (its last connection closed) and coming back: its next grant waits
// for its next window. share.max 10% of the 100 ms period is 10 ms; the
// group's two 5 ms grants (the second cut to what is left) spend it.
func TestCeilingKeptOverReconnect(t *testing.T) {
	cfg := testCfg(t)
	setGroup(t, cfg, "cap", group.Change{File: group.FileShareMax, Value: "10%"})
	startDaemon(t, cfg)
	p := startChild(t, cfg, "redial", "cap", "GS_N=2")
	iv := parseGrants(t, p.all(t, 10*time.Second))
	if len(iv) != 3 {
		t.Fatalf("grants %+v, want 3", iv)
	}
	// The window starts when the daemon hands out the first grant, before
	// the child has it; the third grant comes at the window's end or later.
	if gap := time.Duration(iv[2].start - iv[0].start); gap < cfg.Policy.Period/2 {
		t.Fatalf("granted again %v after the first grant, with the budget of the window spent: %+v", gap, iv)
	}
}
