package api

import (
	"errors"
	"slices"
	"testing"
)

func TestParseShareWant(t *testing.T) {
	units := map[string][]ShareValue{
		"50":                    {{Value: 50}},
		" 25 ":                  {{Value: 25}},
		`{"main":50}`:           {{Container: "main", Value: 50}},
		`{"main":50,"side":10}`: {{Container: "main", Value: 50}, {Container: "side", Value: 10}},
		"0":                     nil,
		"101":                   nil,
		"050":                   nil,
		"1.5":                   nil,
		`{"main":50,"main":10}`: nil,
		`{"main":"50"}`:         nil,
		`{"Main":50}`:           nil,
		`{}`:                    nil,
		`{"main":50} x`:         nil,
		"":                      nil,
	}
	for s, want := range units {
		got, err := ParseUnitsWant(s)
		if want == nil {
			if !errors.Is(err, ErrInvalidShare) {
				t.Errorf("units %q: got %v, %v; want ErrInvalidShare", s, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("units %q: got %v, %v; want %v", s, got, err, want)
		}
	}
	mem := map[string][]ShareValue{
		"4Gi":              {{Value: 4 << 30}},
		`{"main":"512Mi"}`: {{Container: "main", Value: 512 << 20}},
		`{"main":1048576}`: {{Container: "main", Value: 1 << 20}},
		"0":                nil,
		"-1Gi":             nil,
		"1.5":              nil,
		"lots":             nil,
		`{"main":"4Gi",}`:  nil,
	}
	for s, want := range mem {
		got, err := ParseMemoryWant(s)
		if want == nil {
			if !errors.Is(err, ErrInvalidShare) {
				t.Errorf("memory %q: got %v, %v; want ErrInvalidShare", s, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("memory %q: got %v, %v; want %v", s, got, err, want)
		}
	}
}

func FuzzParseShareWant(f *testing.F) {
	for _, s := range []string{"50", `{"main":50}`, "4Gi", `{"a":"1Gi","b":2}`, "{", `{"a":1}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, parse := range []func(string) ([]ShareValue, error){ParseUnitsWant, ParseMemoryWant} {
			out, err := parse(s)
			if err != nil {
				if !errors.Is(err, ErrInvalidShare) {
					t.Fatalf("%q: error %v does not wrap ErrInvalidShare", s, err)
				}
				continue
			}
			if len(out) == 0 {
				t.Fatalf("%q: accepted with no values", s)
			}
			for _, v := range out {
				if v.Value < 1 {
					t.Fatalf("%q: accepted value %d", s, v.Value)
				}
			}
		}
	})
}
