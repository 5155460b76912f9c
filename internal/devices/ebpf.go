package devices

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// The kernel's struct bpf_cgroup_dev_ctx: access_type (type in the low 16
// bits, BPF_DEVCG_ACC_* in the high 16), major, minor; all u32.
const (
	ctxAccessType = 0
	ctxMajor      = 4
	ctxMinor      = 8
	bpfDevBlock   = 1 // BPF_DEVCG_DEV_BLOCK
	bpfDevChar    = 2 // BPF_DEVCG_DEV_CHAR
)

// ProgramLicense is the license string the program is loaded with (it calls
// no GPL-only helper).
const ProgramLicense = "Apache-2.0"

// Program builds the BPF_PROG_TYPE_CGROUP_DEVICE program that decides like
// e: one block per exception (type, major, minor, then access: an allowing
// exception must cover all requested bits, a denying one overlap any), each
// returning the exception's verdict, and the default verdict at the end.
// R0 = 1 allows, 0 denies.
func Program(e *Emulator) asm.Instructions {
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, ctxAccessType, asm.Word),
		asm.Mov.Reg32(asm.R3, asm.R2),
		asm.RSh.Imm32(asm.R3, 16),     // R3 = requested access bits
		asm.And.Imm32(asm.R2, 0xFFFF), // R2 = device type
		asm.LoadMem(asm.R4, asm.R1, ctxMajor, asm.Word),
		asm.LoadMem(asm.R5, asm.R1, ctxMinor, asm.Word),
	}
	verdict := func(allow bool) int32 {
		if allow {
			return 1
		}
		return 0
	}
	rules := e.Exceptions()
	for i, r := range rules {
		next := fmt.Sprintf("rule%d", i+1)
		var block asm.Instructions
		switch r.Type {
		case TypeChar:
			block = append(block, asm.JNE.Imm32(asm.R2, bpfDevChar, next))
		case TypeBlock:
			block = append(block, asm.JNE.Imm32(asm.R2, bpfDevBlock, next))
		}
		if r.Major != Wildcard {
			block = append(block, asm.JNE.Imm32(asm.R4, int32(uint32(r.Major)), next))
		}
		if r.Minor != Wildcard {
			block = append(block, asm.JNE.Imm32(asm.R5, int32(uint32(r.Minor)), next))
		}
		block = append(block, asm.Mov.Reg32(asm.R1, asm.R3), asm.And.Imm32(asm.R1, int32(r.Perms)))
		if r.Allow {
			block = append(block, asm.JNE.Reg32(asm.R1, asm.R3, next)) // not all bits covered
		} else {
			block = append(block, asm.JEq.Imm32(asm.R1, 0, next)) // no bit overlaps
		}
		block = append(block, asm.Mov.Imm32(asm.R0, verdict(r.Allow)), asm.Return())
		block[0] = block[0].WithSymbol(fmt.Sprintf("rule%d", i))
		insns = append(insns, block...)
	}
	last := asm.Mov.Imm32(asm.R0, verdict(e.defaultAllow))
	if len(rules) > 0 {
		last = last.WithSymbol(fmt.Sprintf("rule%d", len(rules)))
	}
	return append(insns, last, asm.Return())
}
