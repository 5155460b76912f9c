package timeslice

import (
	"testing"

	"github.com/gpuslice/gpuslice/internal/identity"
	"github.com/gpuslice/gpuslice/internal/proto"
)

// TestGroupOn: a caller whose container has device groups is granted each
// GPU as that GPU's group (a MIG instance's 16 bytes find its directory just
// the same), any other GPU as its own; its host pid goes into each group it
// holds, its own first, each once.
func TestGroupOn(t *testing.T) {
	a, err := proto.ParseUUID("GPU-11111111-1111-1111-1111-11111111aaaa")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := proto.ParseUUID("GPU-22222222-2222-2222-2222-22222222bbbb")
	other, _ := proto.ParseUUID("GPU-33333333-3333-3333-3333-333333333333")
	c := &conn{peer: identity.Peer{PID: 7, Group: "dra-b", Via: "group-file"}, devGroups: map[string]string{
		"11111111-1111-1111-1111-11111111aaaa": "dra-a", "22222222-2222-2222-2222-22222222bbbb": "dra-b"}}
	for u, want := range map[proto.UUID]string{a: "dra-a", b: "dra-b", other: "dra-b"} {
		if got := c.groupOn(u); got != want {
			t.Errorf("groupOn(%s) = %s, want %s", u, got, want)
		}
	}
	ps := c.groupPeers()
	if len(ps) != 2 || ps[0].Group != "dra-b" || ps[0].Via != "group-file" || ps[1].Group != "dra-a" || ps[1].Via != "device" ||
		ps[1].PID != 7 {
		t.Errorf("group peers %+v, want dra-b (its own) then dra-a (a device's), pid 7 each", ps)
	}
	if ps := (&conn{peer: identity.Peer{Group: "g"}}).groupPeers(); len(ps) != 1 || ps[0].Group != "g" {
		t.Errorf("without device groups: %+v", ps)
	}
}
