/* SPDX-License-Identifier: Apache-2.0
 * A group file as a manager (gpuslice run, the time-slice daemon,
 * gpuslice-node) makes it, for tests that start members in one. */
#ifndef GS_TEST_SHMFILE_H
#define GS_TEST_SHMFILE_H

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <gpuslice/shm.h>

#include "check.h"

/* Writes a new group file at path: the layout's header, the fields h_set
 * sets (limit, seed, ...; may be NULL), the magic stored last. */
static inline void shm_write_managed(const char *path, void (*h_set)(struct gs_shm_header *, const void *),
				     const void *arg)
{
	struct gs_shm_file *f = calloc(1, sizeof(*f));
	CHECK(f != NULL);
	struct gs_shm_header *h = &f->hdr;
	h->version = GS_SHM_VERSION;
	h->header_size = sizeof(*h);
	h->file_size = GS_SHM_FILE_SIZE;
	h->max_gpus = GS_SHM_MAX_GPUS;
	h->max_procs = GS_SHM_MAX_PROCS;
	h->gpu_size = sizeof(struct gs_shm_gpu);
	h->proc_size = sizeof(struct gs_shm_proc);
	h->gpu_offset = offsetof(struct gs_shm_file, gpu);
	h->proc_offset = offsetof(struct gs_shm_file, proc);
	if (h_set != NULL)
		h_set(h, arg);
	h->magic = GS_SHM_MAGIC;
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0 && write(fd, f, sizeof(*f)) == (ssize_t)sizeof(*f));
	close(fd);
	free(f);
}

#endif /* GS_TEST_SHMFILE_H */
