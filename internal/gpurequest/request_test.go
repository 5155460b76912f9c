package gpurequest

import (
	"errors"
	"testing"
	"time"

	"github.com/gpuslice/gpuslice/internal/group"
	"github.com/gpuslice/gpuslice/internal/policy"
)

func TestSettings(t *testing.T) {
	for name, tc := range map[string]struct {
		r    Request
		want group.Settings
		err  error
	}{
		"nothing asked":           {want: group.Settings{Priority: policy.Low}},
		"units share, rounded":    {r: Request{GPUs: []GPU{{Units: 1, Total: 3}}}, want: group.Settings{Share: 0.333333}},
		"smallest share":          {r: Request{GPUs: []GPU{{Units: 30, Total: 100}, {Units: 24, Total: 96}}}, want: group.Settings{Share: 0.25}},
		"all units: no share":     {r: Request{GPUs: []GPU{{Units: 100, Total: 100}}, Slice: time.Millisecond}, want: group.Settings{Slice: time.Millisecond}},
		"units past the total":    {r: Request{GPUs: []GPU{{Units: 120, Total: 96}}}, want: group.Settings{}},
		"no total: no share":      {r: Request{GPUs: []GPU{{Units: 10}}}, want: group.Settings{}},
		"units win over a slice":  {r: Request{GPUs: []GPU{{Units: 40, Total: 100}}, Slice: 20 * time.Millisecond}, want: group.Settings{Share: 0.4}},
		"units win over a share":  {r: Request{GPUs: []GPU{{Units: 40, Total: 100}}, Share: 0.7}, want: group.Settings{Share: 0.4}},
		"asked share, rounded":    {r: Request{Share: 0.12345678}, want: group.Settings{Share: 0.123457}},
		"smallest memory":         {r: Request{GPUs: []GPU{{Memory: 3 << 30}, {Memory: 2 << 30}, {}}}, want: group.Settings{MemoryMax: 2 << 30}},
		"priority":                {r: Request{Priority: "online"}, want: group.Settings{Priority: policy.High}},
		"bad priority":            {r: Request{Priority: "max"}, err: group.ErrInvalid},
		"share ceiling":           {r: Request{ShareMax: 0.4}, want: group.Settings{ShareMax: 0.4}},
		"share ceiling below 1 %": {r: Request{ShareMax: 0.001}, err: group.ErrInvalid},
		"elastic": {r: Request{GPUs: []GPU{{Memory: 6 << 30}}, MemoryCeiling: 20 << 30, Spill: true},
			want: group.Settings{MemoryMin: 6 << 30, MemoryMax: 20 << 30, MemorySpill: true}},
		"elastic at the guarantee":        {r: Request{GPUs: []GPU{{Memory: 6 << 30}}, MemoryCeiling: 6 << 30}, want: group.Settings{MemoryMin: 6 << 30, MemoryMax: 6 << 30}},
		"ceiling without a guarantee":     {r: Request{MemoryCeiling: 20 << 30}, err: ErrCeilingWithoutGuarantee},
		"ceiling below the guarantee":     {r: Request{GPUs: []GPU{{Memory: 6 << 30}}, MemoryCeiling: 4 << 30}, err: ErrCeilingBelowGuarantee},
		"spill without a ceiling":         {r: Request{GPUs: []GPU{{Memory: 6 << 30}}, Spill: true}, err: ErrSpillWithoutCeiling},
		"slice out of the daemon's range": {r: Request{Slice: time.Hour}, err: group.ErrInvalid},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := tc.r.Settings()
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !errors.Is(err, group.ErrInvalid) {
					t.Fatalf("%+v %v, want %v", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("%+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

// Round keeps what the share file writes and reads back.
func TestRoundAsTheShareFile(t *testing.T) {
	for _, f := range []float64{1.0 / 3, 0.25, 0.0112, 2.0 / 7, 0.999999, 1e-6} {
		r := Round(f)
		back, err := group.ParseShare(group.FormatPercent(r))
		if err != nil || back != r {
			t.Errorf("%v: rounded %v, the share file reads back %v %v", f, r, back, err)
		}
	}
}
