package dra

import (
	"context"
	"errors"
	"strings"
	"testing"

	drav1 "github.com/gpuslice/gpuslice/pkg/apis/dra/v1alpha1"
)

// TestReconfigure: the annotation gpuslice.io/share-config changes a prepared
// claim's group live (priority, share ceiling), keeping its share and memory
// from the allocation; a bad annotation names the field and changes nothing;
// a claim prepared elsewhere is not ours.
func TestReconfigure(t *testing.T) {
	e := newEnv(t)
	d, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := claim("u1", 25, 2*gib)
	if _, err := d.Prepare(ctx, c); err != nil {
		t.Fatal(err)
	}
	group := GroupName(c.UID)
	before, err := e.mgr.Get(group)
	if err != nil {
		t.Fatal(err)
	}
	if before.Settings.Priority.String() != "low" {
		t.Fatalf("prepared with priority %v, want the default low", before.Settings.Priority)
	}
	c.Annotations = map[string]string{drav1.ShareConfigAnnotation: `{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig","priority":"high","shareCeiling":40}`}
	if ours, err := d.Reconfigure(ctx, c); !ours || err != nil {
		t.Fatalf("Reconfigure: ours %v, err %v", ours, err)
	}
	after, err := e.mgr.Get(group)
	if err != nil {
		t.Fatal(err)
	}
	s := after.Settings
	if s.Priority.String() != "high" || s.ShareMax != 0.4 || s.Share != 0.25 || s.MemoryMax != uint64(2*gib) {
		t.Fatalf("after the change: %+v, want priority high, share ceiling 0.4, share 0.25, memory 2 GiB", s)
	}
	c.Annotations[drav1.ShareConfigAnnotation] = `{"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig","shareCeiling":500}`
	_, err = d.Reconfigure(ctx, c)
	if err == nil || !errors.Is(err, drav1.ErrInvalid) || !strings.Contains(err.Error(), "shareCeiling") {
		t.Fatalf("bad annotation: err %v, want one naming shareCeiling", err)
	}
	if got, _ := e.mgr.Get(group); got.Settings != s {
		t.Fatalf("a refused change changed the group: %+v, was %+v", got.Settings, s)
	}
	c.Annotations[drav1.ShareConfigAnnotation] = strings.Repeat(" ", drav1.MaxConfigBytes+1)
	if _, err := d.Reconfigure(ctx, c); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("oversized annotation: err %v", err)
	}
	if ours, err := d.Reconfigure(ctx, claim("elsewhere", 10, gib)); ours || err != nil {
		t.Fatalf("claim not prepared here: ours %v, err %v", ours, err)
	}
}
