package proto

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func samples() []Message {
	gpu := UUID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	w := &Welcome{Features: FeatureRevoke, PeriodNs: 100e6}
	SetString(w.Group[:], "train-a")
	e := &Error{Code: ErrIdentity}
	SetString(e.Message[:], "cannot read /proc/42/cgroup")
	lend := &Lend{GPU: gpu, Allowance: 8 << 30, Available: 12 << 30, Status: LendRefused}
	SetString(lend.Message[:], "borrow of 2.0 GiB refused")
	return []Message{
		&Hello{Features: FeatureRevoke},
		w,
		&Acquire{GPU: gpu},
		&Grant{GPU: gpu, Seq: 7, SliceNs: 10e6, ValidNs: 14e6, Flags: GrantPreempt},
		&Grant{GPU: gpu, Seq: 8, SliceNs: 10e6, ValidNs: 14e6, Flags: GrantAlone, SentAtNs: 44_000_123_456_789},
		&Release{GPU: gpu, Seq: 7, Flags: ReleaseMore},
		&Revoke{GPU: gpu, Seq: 7, Reason: RevokePreempt},
		e,
		&Borrow{GPU: gpu, Size: 6 << 30, Flags: BorrowReclaim},
		lend,
		&Spill{GPU: gpu, Bytes: 2 << 30},
	}
}

func TestRoundTrip(t *testing.T) {
	for _, m := range samples() {
		var buf [FrameSize]byte
		if err := Encode(buf[:], m); err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		got, err := Decode(buf[:])
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip %T: got %+v want %+v", m, got, m)
		}
	}
}

// frame encodes m and applies edit to the raw bytes.
func frame(t *testing.T, m Message, edit func(b []byte)) []byte {
	t.Helper()
	b := make([]byte, FrameSize)
	if err := Encode(b, m); err != nil {
		t.Fatal(err)
	}
	edit(b)
	return b
}

func TestDecodeRejects(t *testing.T) {
	grant := &Grant{Seq: 1}
	tests := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"short", make([]byte, 10), "10 bytes"},
		{"magic", frame(t, grant, func(b []byte) { b[0] ^= 1 }), "magic"},
		{"version", frame(t, grant, func(b []byte) { b[4] = 9 }), "protocol version 9"},
		{"type", frame(t, grant, func(b []byte) { b[6] = 99 }), "unknown message type 99"},
		{"length", frame(t, grant, func(b []byte) { b[8] = 8 }), "grant of 8 bytes"},
		{"header reserved", frame(t, grant, func(b []byte) { b[12] = 1 }), "reserved header"},
		{"padding", frame(t, grant, func(b []byte) { b[FrameSize-1] = 1 }), "padding"},
		{"long grant without sent_at", frame(t, grant, func(b []byte) { b[8] = 56 }), "grant of 56 bytes with sent_at_ns 0"},
		{"short grant with sent_at", frame(t, grant, func(b []byte) { b[HeaderSize+48] = 1 }), "padding"},
		{"grant of neither size", frame(t, grant, func(b []byte) { b[8] = 52 }), "grant of 52 bytes, want 48 or 56"},
		{"flags", frame(t, grant, func(b []byte) { b[HeaderSize+40] = 8 }), "unknown flags 0x8"},
		{"reserved", frame(t, grant, func(b []byte) { b[HeaderSize+44] = 1 }), "reserved field"},
		{"revoke reason", frame(t, &Revoke{Reason: RevokeSliceEnd}, func(b []byte) { b[HeaderSize+24] = 9 }), "revoke reason 9"},
		{"unterminated string", frame(t, &Error{}, func(b []byte) {
			copy(b[HeaderSize+8:HeaderSize+104], bytes.Repeat([]byte("x"), 96))
		}), "not NUL-terminated"},
		{"control char", frame(t, &Error{}, func(b []byte) { b[HeaderSize+8] = '\n' }), "printable"},
	}
	for _, tc := range tests {
		_, err := Decode(tc.frame)
		if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrFrame with %q", tc.name, err, tc.want)
		}
	}
	if err := Encode(make([]byte, 10), grant); err == nil {
		t.Error("encode into a short buffer succeeded")
	}
	if err := Encode(make([]byte, FrameSize), &Grant{Flags: 8}); err == nil {
		t.Error("encode with unknown flags succeeded")
	}
}

func TestStrings(t *testing.T) {
	var b [8]byte
	SetString(b[:], "héllo wörld")
	if got := String(b[:]); got != "héllo " {
		t.Fatalf("cut string %q", got)
	}
	if err := checkString(b[:]); err != nil {
		t.Fatal(err)
	}
	u := UUID{0: 0xab, 15: 0xcd}
	p, err := ParseUUID(u.String())
	if err != nil || p != u {
		t.Fatalf("uuid %s -> %v %v", u, p, err)
	}
	if m, err := ParseUUID("MIG-" + u.String()[len("GPU-"):]); err != nil || m != u {
		t.Fatalf("MIG uuid -> %v %v", m, err)
	}
	for _, bad := range []string{"", "GPU-xyz", "GPU-zzzzzzzz-0000-0000-0000-000000000000", "MIG-GPU-" + u.String()[4:]} {
		if _, err := ParseUUID(bad); err == nil {
			t.Errorf("ParseUUID(%q) accepted", bad)
		}
	}
}

// TestHeaderFresh fails when include/gpuslice/proto.h is not what the Go
// definitions generate: run `go generate ./internal/proto`.
func TestHeaderFresh(t *testing.T) {
	want, err := CHeader()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", HeaderPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `go generate ./internal/proto`", HeaderPath)
	}
}

// TestCAgrees builds a C program against the generated header that writes
// grant frames (without and with sent_at_ns), and decodes them here.
func TestCAgrees(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler: cannot check the header against a C build")
	}
	src := `#include <stdio.h>
#include <string.h>
#include "gpuslice/proto.h"
int main(void) {
	struct gs_frame f;
	memset(&f, 0, sizeof f);
	f.header.magic = GS_PROTO_MAGIC; f.header.version = GS_PROTO_VERSION;
	f.header.type = GS_MSG_GRANT; f.header.len = sizeof f.msg.grant;
	f.msg.grant.gpu[0] = 0xab; f.msg.grant.seq = 42; f.msg.grant.slice_ns = 10000000;
	f.msg.grant.valid_ns = 12000000; f.msg.grant.flags = GS_GRANT_PREEMPT;
	f.header.len = GS_GRANT_SIZE_NO_SENT_AT; /* as older daemons send it */
	for (size_t i = 0; i < sizeof f; i++) printf("%02x", ((unsigned char *)&f)[i]);
	printf("\n");
	f.header.len = sizeof f.msg.grant; f.msg.grant.sent_at_ns = 5000000000123ull;
	for (size_t i = 0; i < sizeof f; i++) printf("%02x", ((unsigned char *)&f)[i]);
	return 0;
}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.c"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "p")
	build := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I", filepath.Join("..", "..", "include"), "-o", bin, filepath.Join(dir, "p.c"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	frames := strings.Fields(string(out))
	want := &Grant{GPU: UUID{0: 0xab}, Seq: 42, SliceNs: 10e6, ValidNs: 12e6, Flags: GrantPreempt}
	long := *want
	long.SentAtNs = 5000000000123
	if len(frames) != 2 {
		t.Fatalf("C program wrote %q", out)
	}
	for i, w := range []*Grant{want, &long} {
		raw, err := hex.DecodeString(frames[i])
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, w) {
			t.Fatalf("C frame %d decoded to %+v, want %+v", i, m, w)
		}
	}
}

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{"PeriodNs": "period_ns", "GPU": "gpu", "SliceNs": "slice_ns", "Seq": "seq", "GPUIndex": "gpu_index"} {
		if got := CName(in); got != want {
			t.Errorf("CName(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzDecode: any input either fails with ErrFrame or decodes to a message that
// encodes back to exactly the same bytes.
func FuzzDecode(f *testing.F) {
	for _, m := range samples() {
		b := make([]byte, FrameSize)
		if err := Encode(b, m); err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(make([]byte, FrameSize))
	f.Add([]byte("GSPR"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrFrame) {
				t.Fatalf("error without ErrFrame: %v", err)
			}
			return
		}
		out := make([]byte, FrameSize)
		if err := Encode(out, m); err != nil {
			t.Fatalf("re-encode %T: %v", m, err)
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("re-encoded frame differs")
		}
	})
}

func BenchmarkCodec(b *testing.B) {
	buf := make([]byte, FrameSize)
	g := &Grant{Seq: 1, SliceNs: 1, ValidNs: 1}
	for b.Loop() {
		if err := Encode(buf, g); err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFastMatchesReflection: the hand-written codecs produce and read exactly
// what encoding/binary does with the struct definitions.
func TestFastMatchesReflection(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		var gpu UUID
		for i := range gpu {
			gpu[i] = byte(rng.Uint32())
		}
		for _, m := range []Message{
			&Acquire{GPU: gpu, Flags: rng.Uint32(), Reserved: rng.Uint32()},
			&Grant{GPU: gpu, Seq: rng.Uint64(), SliceNs: rng.Uint64(), ValidNs: rng.Uint64(), Flags: rng.Uint32(), Reserved: rng.Uint32(),
				SentAtNs: rng.Uint64() * uint64(rng.IntN(2))},
			&Release{GPU: gpu, Seq: rng.Uint64(), Flags: rng.Uint32(), Reserved: rng.Uint32()},
			&Revoke{GPU: gpu, Seq: rng.Uint64(), Reason: rng.Uint32(), Reserved: rng.Uint32()},
		} {
			fast := make([]byte, FrameSize)
			if !encodeFast(fast, m) {
				t.Fatalf("%T has no fast codec", m)
			}
			slow := make([]byte, FrameSize)
			// A grant without SentAtNs is the struct less its last field (zero).
			h := Header{Magic: Magic, Version: Version, Type: uint16(m.Type()), Len: uint32(encodedSize(m))}
			if _, err := binary.Encode(slow, binary.LittleEndian, &h); err != nil {
				t.Fatal(err)
			}
			if _, err := binary.Encode(slow[HeaderSize:], binary.LittleEndian, m); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(fast, slow) {
				t.Fatalf("%T: fast encoding differs", m)
			}
			if got := decodeFast(m.Type(), fast[HeaderSize:], h.Len); !reflect.DeepEqual(got, m) {
				t.Fatalf("%T: fast decoding %+v, want %+v", m, got, m)
			}
		}
	}
}
