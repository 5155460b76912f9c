/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-simbusy: prints the simulated GPU's per-process busy time and work
 * (the kernels' own durations) from its shared state file
 * (simgpu/src/simstate.h), for the node end to end:
 *   proc <host pid> <device index> <busy ns> <work ns>
 * one line per live process and device it has a context on (a MIG GPU
 * instance is a device slot of its own, from SIM_MAX_GPUS on). The file is
 * mapped read-only and checked (magic, version, size). Exit status: 0, 1 on
 * a missing or foreign file, 2 on bad arguments.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "simstate.h"

int main(int argc, char **argv)
{
	struct stat st;
	int fd;

	if (argc != 2) {
		fprintf(stderr, "usage: gs-simbusy <state file>\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct sim_state)) {
		fprintf(stderr, "gs-simbusy: %s: no simulator state file\n", argv[1]);
		return 1;
	}
	const struct sim_state *s = mmap(NULL, sizeof(*s), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (s == MAP_FAILED || s->magic != SIM_STATE_MAGIC || s->version != SIM_STATE_VERSION ||
	    s->size != sizeof(*s) || s->ndev > SIM_MAX_DEVICES) {
		fprintf(stderr, "gs-simbusy: %s: not a version %u simulator state file\n", argv[1], SIM_STATE_VERSION);
		return 1;
	}
	for (int i = 0; i < SIM_MAX_PROCS; i++) {
		const struct sim_proc_state *p = &s->proc[i];
		int32_t pid = atomic_load(&p->pid);
		if (pid == 0)
			continue;
		for (uint32_t d = 0; d < SIM_MAX_DEVICES; d++)
			if (p->dev_mask & (1u << d))
				printf("proc %d %u %llu %llu\n", (int)pid, d,
				       (unsigned long long)atomic_load(&p->busy_ns[d]),
				       (unsigned long long)atomic_load(&p->work_ns[d]));
	}
	return 0;
}
