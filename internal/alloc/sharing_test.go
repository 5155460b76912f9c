package alloc

import (
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/pkg/api"
)

// A pod that names a sharing mode gets only GPUs in that mode; in mps mode the
// units the node measured free (client slots) bound what fits.
func TestFitSharingMode(t *testing.T) {
	nd := node("n1", 2)
	nd.GPUs[1].Mode, nd.GPUs[1].UnitsTotal, nd.GPUs[1].UnitsFree = api.SharingMPS, 96, 96
	cases := []struct {
		name    string
		sharing api.SharingMode
		units   int64
		free    int64 // measured free units of the mps GPU
		want    string
		wantErr string
	}{
		{name: "either: binpack takes the first", units: 25, free: 96, want: "0:25"},
		{name: "mps only", sharing: api.SharingMPS, units: 25, free: 96, want: "1:25"},
		{name: "timeslice only", sharing: api.SharingTimeslice, units: 25, free: 96, want: "0:25"},
		{name: "mps, client slots used up", sharing: api.SharingMPS, units: 25, free: 20, wantErr: "in another sharing mode"},
		{name: "mps, measured free bounds", sharing: api.SharingMPS, units: 20, free: 20, want: "1:20"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBooks(cfg())
			n := nd
			n.GPUs = append([]GPU(nil), nd.GPUs...)
			n.GPUs[1].UnitsFree = tc.free
			setNode(b, n)
			req := share(tc.units, 1)
			req.Sharing = tc.sharing
			a, err := b.Fit("n1", req, t0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := indices(a); got != tc.want {
				t.Fatalf("assignment %s, want %s", got, tc.want)
			}
		})
	}
}
