package devices

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// run interprets the marshalled program (the bytes the kernel would get) on
// one device access. It knows the instructions Program emits and fails on
// anything else, so a program the builder should not produce fails the test.
func run(t testing.TB, code []byte, d Device, p Perms) bool {
	t.Helper()
	devType := uint32(bpfDevChar)
	if d.Type == TypeBlock {
		devType = bpfDevBlock
	}
	ctx := [3]uint32{devType | uint32(p)<<16, d.Major, d.Minor}
	var reg [11]uint64
	n := len(code) / 8
	for pc, steps := 0, 0; pc < n; pc, steps = pc+1, steps+1 {
		if steps > 10000 {
			t.Fatal("program does not terminate")
		}
		ins := code[pc*8 : pc*8+8]
		op, dst, src := ins[0], ins[1]&0xf, ins[1]>>4
		off := int16(binary.LittleEndian.Uint16(ins[2:]))
		imm := int32(binary.LittleEndian.Uint32(ins[4:]))
		val := uint64(uint32(imm))
		if op&0x08 != 0 {
			val = reg[src]
		}
		switch cls := op & 0x07; {
		case op == 0x61: // ldxw dst, [src+off]
			if src != 1 || off%4 != 0 || off < 0 || off > 8 {
				t.Fatalf("pc %d: load outside the context", pc)
			}
			reg[dst] = uint64(ctx[off/4])
		case cls == 0x04: // alu32
			a := uint32(reg[dst])
			switch op & 0xf0 {
			case 0xb0:
				a = uint32(val)
			case 0x50:
				a &= uint32(val)
			case 0x70:
				a >>= uint32(val)
			default:
				t.Fatalf("pc %d: unexpected alu op %#x", pc, op)
			}
			reg[dst] = uint64(a)
		case op == 0x95: // exit
			switch reg[0] {
			case 0:
				return false
			case 1:
				return true
			}
			t.Fatalf("returns %d", reg[0])
		case cls == 0x06 || op == 0x05: // jmp32, ja
			var taken bool
			switch op & 0xf0 {
			case 0x00:
				taken = true
			case 0x10:
				taken = uint32(reg[dst]) == uint32(val)
			case 0x50:
				taken = uint32(reg[dst]) != uint32(val)
			default:
				t.Fatalf("pc %d: unexpected jump op %#x", pc, op)
			}
			if taken {
				pc += int(off)
			}
		default:
			t.Fatalf("pc %d: unexpected opcode %#x", pc, op)
		}
	}
	t.Fatal("fell off the end of the program")
	return false
}

func marshal(t testing.TB, e *Emulator) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Program(e).Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return buf.Bytes()
}

func TestProgramTables(t *testing.T) {
	gpu0, gpu1 := Device{TypeChar, 195, 0}, Device{TypeChar, 195, 1}
	cases := []struct {
		name  string
		rules []string
		dev   Device
		perms Perms
		want  bool
	}{
		{"empty denies", nil, gpu0, Read, false},
		{"allowed gpu", []string{"allow c 195:0 rw"}, gpu0, Read | Write, true},
		{"other gpu", []string{"allow c 195:0 rw"}, gpu1, Read, false},
		{"mknod not granted", []string{"allow c 195:0 rw"}, gpu0, Mknod, false},
		{"wildcard mknod", []string{"allow c *:* m", "allow c 195:0 rw"}, gpu1, Mknod, true},
		{"block vs char", []string{"allow b *:* rwm"}, gpu0, Read, false},
		{"big major", []string{"allow c 4294967294:7 r"}, Device{TypeChar, 1<<32 - 2, 7}, Read, true},
		{"allow-all", []string{"allow a"}, gpu1, PermsAll, true},
		{"allow-all with deny", []string{"allow a", "deny c 195:1 w"}, gpu1, Read | Write, false},
		{"allow-all deny no overlap", []string{"allow a", "deny c 195:1 w"}, gpu1, Read, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEmulator(false)
			write(t, e, tc.rules...)
			if got := run(t, marshal(t, e), tc.dev, tc.perms); got != tc.want {
				t.Fatalf("program says %v for %s %s, want %v\n%v", got, tc.dev, tc.perms, tc.want, Program(e))
			}
			if e.Allows(tc.dev, tc.perms) != tc.want {
				t.Fatalf("emulator disagrees")
			}
		})
	}
}

// The program decides exactly like the v1 emulator for random rule sets.
func TestProgramMatchesEmulator(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		e := randomEmulator(rng, rng.IntN(10))
		code := marshal(t, e)
		forEachAccess(func(d Device, p Perms) {
			if got, want := run(t, code, d, p), e.Allows(d, p); got != want {
				t.Fatalf("case %d: %s %s: program %v, emulator %v; list %q default-allow %v",
					i, d, p, got, want, e.List(), e.DefaultAllow())
			}
		})
	}
}

func BenchmarkProgram(b *testing.B) {
	e := NewEmulator(false)
	for i := range 16 {
		if err := e.Apply(DeviceRule(Device{TypeChar, 195, uint32(i)}, Read|Write, true)); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		_ = Program(e)
	}
	b.ReportMetric(float64(len(Program(e))), "insns")
}
