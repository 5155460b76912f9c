package units

import (
	"errors"
	"testing"
)

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"0", 0, false},
		{"1024", 1024, false},
		{"6GiB", 6 << 30, false},
		{"6G", 6e9, false},
		{"6Gi", 6 << 30, false},
		{"10G", 10e9, false},
		{"512Mi", 512 << 20, false},
		{"1.5Gi", 3 << 29, false},
		{"100B", 100, false},
		{"1e9", 1e9, false},
		{"1000000000000000000", 1e18, false}, // 19 digits: held as a decimal, not an int64
		{"1E", 1e18, false},
		{"10000000000000000000.5", 0, true},
		{"4k", 4000, false},
		{"4KB", 4000, false},
		{"4KiB", 4096, false},
		{"100m", 0, true},
		{"0.5", 0, true},
		{"6GB", 6e9, false},
		{"512MiB", 512 << 20, false},
		{"1.5GiB", 3 << 29, false},
		{" 2 TiB ", 2 << 40, false},
		{"23GiB", 23 << 30, false},
		{"", 0, true},
		{"GiB", 0, true},
		{"6XB", 0, true},
		{"-1GiB", 0, true},
		{"1.2.3GiB", 0, true},
		{"99999999999999999999", 0, true},
		{"6gi", 0, true},
		{"17179869184TiB", 0, true},
		{"1e3MiB", 0, true},
		{"1GiBB", 0, true},
		{"9223372036854775808", 0, true},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if c.err {
			if err == nil || !errors.Is(err, ErrSize) {
				t.Errorf("ParseSize(%q) = %d, %v; want an ErrSize error", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	cases := map[uint64]string{0: "0 B", 1023: "1023 B", 1 << 30: "1.0 GiB", 23 << 30: "23.0 GiB", 3 << 29: "1.5 GiB", 5 << 20: "5.0 MiB"}
	for in, want := range cases {
		if got := FormatSize(in); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"6GiB", "1.5G", "0", "512MiB", "9TB", "x", ".", "1..1", "18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, ErrSize) {
				t.Fatalf("error %v does not wrap ErrSize", err)
			}
			return
		}
		// A parsed size formats and, for whole binary units, round-trips.
		_ = FormatSize(n)
		if n%(1<<20) == 0 && n < 1<<50 {
			back, err := ParseSize(FormatSize(n))
			if err != nil {
				t.Fatalf("FormatSize(%d) = %q does not parse: %v", n, FormatSize(n), err)
			}
			if back > n || n-back > n/100+1 {
				t.Fatalf("round trip %d -> %q -> %d", n, FormatSize(n), back)
			}
		}
	})
}
