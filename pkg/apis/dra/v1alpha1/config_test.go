package v1alpha1

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const head = `"apiVersion":"gpuslice.io/v1alpha1","kind":"GPUShareConfig"`

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		err      string // substring; "" = ok
		check    func(*GPUShareConfig) bool
	}{
		{name: "empty", in: `{` + head + `}`, check: func(c *GPUShareConfig) bool { return c.Priority == "" && c.Slice == nil }},
		{name: "all", in: `{` + head + `,"priority":"high","slice":"20ms","shareCeiling":40,"memoryCeiling":"8Gi","spill":true}`,
			check: func(c *GPUShareConfig) bool {
				return c.Priority == "high" && c.Slice.Duration == 20*time.Millisecond && *c.ShareCeiling == 40 &&
					c.MemoryCeiling.Value() == 8<<30 && c.Spill
			}},
		{name: "unknown field", in: `{` + head + `,"prio":"high"}`, err: `unknown field "prio"`},
		{name: "duplicate field", in: `{` + head + `,"priority":"high","priority":"low"}`, err: `duplicate field "priority"`},
		{name: "case mismatch", in: `{` + head + `,"Priority":"high"}`, err: "Priority"},
		{name: "wrong kind", in: `{"apiVersion":"gpuslice.io/v1alpha1","kind":"GpuConfig"}`, err: `kind "GpuConfig"`},
		{name: "wrong version", in: `{"apiVersion":"gpuslice.io/v1","kind":"GPUShareConfig"}`, err: `apiVersion "gpuslice.io/v1"`},
		{name: "no type", in: `{}`, err: "want apiVersion gpuslice.io/v1alpha1"},
		{name: "trailing", in: `{` + head + `} {}`, err: "trailing data"},
		{name: "not JSON", in: `priority: high`, err: "JSON"},
		{name: "bad type", in: `{` + head + `,"shareCeiling":"40%"}`, err: "shareCeiling"},
		{name: "too large", in: `{` + head + `,"priority":"` + strings.Repeat("x", MaxConfigBytes) + `"}`, err: "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode([]byte(tc.in))
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalid)):
				t.Fatalf("Decode error %v, want one containing %q wrapping ErrInvalid", err, tc.err)
			case tc.err == "" && !tc.check(c):
				t.Fatalf("decoded %+v", c)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestDefaultAndValidate(t *testing.T) {
	if c := DefaultConfig(); c.Priority != PriorityLow || c.Validate() != nil {
		t.Fatalf("DefaultConfig %+v: %v", c, c.Validate())
	}
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	for _, tc := range []struct {
		name string
		c    GPUShareConfig
		err  string // the field named; "" = valid
	}{
		{name: "defaults", c: GPUShareConfig{}},
		{name: "high", c: GPUShareConfig{Priority: "high"}},
		{name: "priority", c: GPUShareConfig{Priority: "online"}, err: `priority: Unsupported value: "online"`},
		{name: "slice low", c: GPUShareConfig{Slice: &metav1.Duration{Duration: 50 * time.Microsecond}}, err: "slice: Invalid value"},
		{name: "slice high", c: GPUShareConfig{Slice: &metav1.Duration{Duration: 11 * time.Second}}, err: "slice: Invalid value"},
		{name: "slice ok", c: GPUShareConfig{Slice: &metav1.Duration{Duration: 100 * time.Microsecond}}},
		{name: "ceiling 0", c: GPUShareConfig{ShareCeiling: ptr[int32](0)}, err: "shareCeiling: Invalid value: 0"},
		{name: "ceiling 101", c: GPUShareConfig{ShareCeiling: ptr[int32](101)}, err: "shareCeiling: Invalid value: 101"},
		{name: "ceiling 100", c: GPUShareConfig{ShareCeiling: ptr[int32](100)}},
		{name: "memory fraction", c: GPUShareConfig{MemoryCeiling: q("1.5")}, err: "memoryCeiling: Invalid value"},
		{name: "memory negative", c: GPUShareConfig{MemoryCeiling: q("-1Gi")}, err: "memoryCeiling: Invalid value"},
		{name: "spill alone", c: GPUShareConfig{Spill: true}, err: "spill: Invalid value: true"},
		{name: "spill", c: GPUShareConfig{Spill: true, MemoryCeiling: q("8Gi")}},
		{name: "two errors", c: GPUShareConfig{Priority: "x", ShareCeiling: ptr[int32](-1)}, err: "shareCeiling"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.Default()
			err := c.Validate()
			if (err == nil) != (tc.err == "") || err != nil && (!strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrInvalid)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestValidateFor(t *testing.T) {
	q := resource.MustParse("8Gi")
	for _, tc := range []struct {
		name string
		c    GPUShareConfig
		cl   Claim
		err  string
	}{
		{name: "slice whole", c: GPUShareConfig{Slice: &metav1.Duration{Duration: time.Millisecond}}},
		{name: "slice share", c: GPUShareConfig{Slice: &metav1.Duration{Duration: time.Millisecond}}, cl: Claim{Share: true}, err: "slice: Forbidden"},
		{name: "ceiling no memory", c: GPUShareConfig{MemoryCeiling: &q}, err: "memoryCeiling: Forbidden"},
		{name: "ceiling below", c: GPUShareConfig{MemoryCeiling: &q}, cl: Claim{Memory: 9 << 30}, err: "memoryCeiling: Invalid value: \"8Gi\": below the claim's memory 9Gi"},
		{name: "ceiling equal", c: GPUShareConfig{MemoryCeiling: &q}, cl: Claim{Memory: 8 << 30}},
		{name: "field first", c: GPUShareConfig{Priority: "x"}, cl: Claim{Share: true}, err: "priority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.Default()
			err := c.ValidateFor(tc.cl)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ValidateFor = %v, want %q", err, tc.err)
			}
		})
	}
}

func TestDeepCopyIndependent(t *testing.T) {
	q := resource.MustParse("8Gi")
	a := &GPUShareConfig{ShareCeiling: ptr[int32](5), MemoryCeiling: &q, Slice: &metav1.Duration{Duration: time.Millisecond}}
	b := a.DeepCopy()
	*b.ShareCeiling, b.Slice.Duration = 6, time.Second
	b.MemoryCeiling.Add(resource.MustParse("1Gi"))
	if *a.ShareCeiling != 5 || a.Slice.Duration != time.Millisecond || a.MemoryCeiling.Value() != 8<<30 {
		t.Fatalf("copy shares memory with the original: %+v", a)
	}
	if _, ok := b.DeepCopyObject().(*GPUShareConfig); !ok {
		t.Fatal("DeepCopyObject is not a *GPUShareConfig")
	}
}

// FuzzDecode: any input is decoded or refused, never a panic; what decodes
// and validates stays valid after a round trip through JSON.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{` + head + `,"priority":"high","slice":"20ms","shareCeiling":40,"memoryCeiling":"8Gi","spill":true}`))
	f.Add([]byte(`{` + head + `}`))
	f.Add([]byte(`{` + head + `,"memoryCeiling":"1e400"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		c.Default()
		if c.Validate() != nil {
			return
		}
		_ = c.ValidateFor(Claim{Memory: 1 << 30, Share: true})
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		d, err := Decode(out)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("%s no longer valid: %v", out, err)
		}
	})
}
