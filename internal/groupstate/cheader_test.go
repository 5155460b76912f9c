package groupstate

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestHeaderFresh fails when libgpuslice/include/gpuslice/shm.h is not what
// the Go definitions generate: run `go generate ./internal/groupstate`.
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
		t.Fatalf("%s is stale: run `go generate ./internal/groupstate`", HeaderPath)
	}
}

// TestCAgrees compiles the generated header (its static assertions pin every
// offset and size to the Go structs') and reads a file a C program made with
// it: the header Go reads is the one C wrote.
func TestCAgrees(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler: cannot check the header against a C build")
	}
	dir := t.TempDir()
	src := `#include <stdio.h>
#include <string.h>
#include "gpuslice/shm.h"
int main(int argc, char **argv) {
	static struct gs_shm_file f;
	(void)argc;
	f.hdr.version = GS_SHM_VERSION; f.hdr.header_size = sizeof f.hdr; f.hdr.file_size = GS_SHM_FILE_SIZE;
	f.hdr.max_gpus = GS_SHM_MAX_GPUS; f.hdr.max_procs = GS_SHM_MAX_PROCS; f.hdr.gpu_size = sizeof f.gpu[0];
	f.hdr.proc_size = sizeof f.proc[0]; f.hdr.gpu_offset = offsetof(struct gs_shm_file, gpu);
	f.hdr.proc_offset = offsetof(struct gs_shm_file, proc); f.hdr.limit = 12345; f.hdr.limit_set = 1;
	f.gpu[0].state = GS_SLOT_READY; strcpy(f.gpu[0].uuid, "GPU-c"); f.gpu[0].limit = 777; f.gpu[0].used = 42;
	f.gpu[0].min = 7; f.gpu[0].elastic = GS_ELASTIC_ON | GS_ELASTIC_SPILL;
	f.proc[3].state = GS_PROC_LIVE; f.proc[3].pid = 99; f.proc[3].start_time = 5; f.proc[3].pidns = 6;
	f.hdr.magic = GS_SHM_MAGIC;
	FILE *o = fopen(argv[1], "wb");
	return !(o && fwrite(&f, sizeof f, 1, o) == 1 && fclose(o) == 0);
}`
	if err := os.WriteFile(filepath.Join(dir, "w.c"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	bin, state := filepath.Join(dir, "w"), filepath.Join(dir, FileName)
	inc := filepath.Join("..", "..", "libgpuslice", "include")
	if out, err := exec.Command(cc, "-std=c11", "-Wall", "-Werror", "-I", inc, "-o", bin, filepath.Join(dir, "w.c")).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, state).CombinedOutput(); err != nil {
		t.Fatalf("writer: %v\n%s", err, out)
	}
	lim, set, err := HeaderLimit(state)
	if err != nil || !set || lim != 12345 {
		t.Fatalf("header limit %d set %v: %v", lim, set, err)
	}
	gpus, err := ReadMemory(state)
	if err != nil || len(gpus) != 1 || gpus[0].UUID != "GPU-c" || gpus[0].Limit != 777 || gpus[0].Used != 42 {
		t.Fatalf("GPU slots %+v: %v", gpus, err)
	}
	ps, err := Processes(state)
	if err != nil || len(ps) != 1 || ps[0].PID != 99 || ps[0].StartTime != 5 || ps[0].PIDNS != 6 {
		t.Fatalf("processes %+v: %v", ps, err)
	}
}
