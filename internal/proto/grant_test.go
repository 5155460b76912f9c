package proto

import (
	"encoding/hex"
	"reflect"
	"testing"
)

func TestGrantEnd(t *testing.T) {
	const ms = uint64(1e6)
	const read = 1_000_000 * ms // the reader's clock at the reading
	const age = uint64(SentAtMaxAgeMs) * ms
	for _, tc := range []struct {
		name             string
		sentAt, valid    uint64
		wantStart, wantE uint64
	}{
		{"older daemon: no sent_at", 0, 8 * ms, read, read + 8*ms},
		{"read at once", read, 8 * ms, read, read + 8*ms},
		{"read 5 ms late: ends by the daemon's clock", read - 5*ms, 8 * ms, read - 5*ms, read + 3*ms},
		{"read after the daemon's end: already over", read - 20*ms, 8 * ms, read - 20*ms, read - 12*ms},
		{"read 5 s late, the daemon's end long past", read - 5000*ms, 8 * ms, read - 5000*ms, read - 4992*ms},
		{"read at the age bound", read - age, 8 * ms, read - age, read - age + 8*ms},
		{"older than the bound: another clock", read - age - 1, 8 * ms, read, read + 8*ms},
		{"from the future: another clock", read + 1, 8 * ms, read, read + 8*ms},
		{"zero valid", read - ms, 0, read - ms, read - ms},
		{"saturates", read - ms, ^uint64(0), read - ms, ^uint64(0)},
	} {
		start, end := GrantEnd(read, tc.sentAt, tc.valid)
		if start != tc.wantStart || end != tc.wantE {
			t.Errorf("%s: start %d end %d, want %d %d", tc.name, start, end, tc.wantStart, tc.wantE)
		}
		if _, old := GrantEnd(read, 0, tc.valid); end > old {
			t.Errorf("%s: end %d later than the reading's %d", tc.name, end, old)
		}
	}
}

// TestGrantVersions: a grant as daemons before FeatureSentAt send it (48
// bytes, the bytes of a version-2 frame from then) still decodes; a grant with
// SentAtNs is 56 bytes.
func TestGrantVersions(t *testing.T) {
	old, err := hex.DecodeString("47535052020004003000000000000000" + // header: grant, 48 bytes
		"ab000000000000000000000000000000" + "2a00000000000000" + "8096980000000000" + // gpu, seq 42, slice 10ms
		"001bb70000000000" + "01000000" + "00000000" + // valid 12ms, flags preempt, reserved
		"0000000000000000000000000000000000000000000000000000000000000000" +
		"0000000000000000000000000000000000000000000000000000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	want := &Grant{GPU: UUID{0: 0xab}, Seq: 42, SliceNs: 10e6, ValidNs: 12e6, Flags: GrantPreempt}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("old grant decoded to %+v, want %+v", m, want)
	}
	for sentAt, size := range map[uint64]uint32{0: GrantSizeNoSentAt, 77: 56} {
		b := make([]byte, FrameSize)
		if err := Encode(b, &Grant{SentAtNs: sentAt}); err != nil {
			t.Fatal(err)
		}
		if got := uint32(b[8]); got != size {
			t.Errorf("grant with sent_at %d encoded as %d bytes, want %d", sentAt, got, size)
		}
	}
}

// FuzzGrantEnd: whatever the daemon sends, a grant never ends later than
// validNs after its reading, never starts after it, and lasts validNs (up to
// the clock's end).
func FuzzGrantEnd(f *testing.F) {
	f.Add(uint64(5e9), uint64(5e9-3e6), uint64(8e6))
	f.Add(uint64(5e9), uint64(0), uint64(8e6))
	f.Add(uint64(5e9), uint64(6e9), ^uint64(0))
	f.Fuzz(func(t *testing.T, read, sentAt, valid uint64) {
		start, end := GrantEnd(read, sentAt, valid)
		_, byRead := GrantEnd(read, 0, valid)
		switch {
		case start > read:
			t.Fatalf("starts at %d, after its reading at %d", start, read)
		case end > byRead:
			t.Fatalf("ends at %d, after %d (valid_ns from the reading)", end, byRead)
		case start != read && start != sentAt:
			t.Fatalf("start %d is neither the reading %d nor sent_at %d", start, read, sentAt)
		case end-start != valid && end != ^uint64(0):
			t.Fatalf("lasts %d, valid %d", end-start, valid)
		}
	})
}
