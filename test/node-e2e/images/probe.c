/* SPDX-License-Identifier: Apache-2.0
 *
 * gs-devprobe: runs inside a test container and reports, every time it
 * changes, which GPU device nodes /dev/nvidia0..15 the container can use:
 * open() succeeding, or failing with ENXIO (the device cgroup allowed it and
 * only a driver is missing, as on the simulated GPU), counts as usable; EPERM
 * (cgroup) or ENOENT (no node) does not. One line per change on stdout:
 *   <CLOCK_REALTIME ns> <count> <minor,minor,...>
 * Polls every 500 us. Static, no dependencies: it runs in a bare image.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS 16

static int usable(int minor)
{
	char path[32];
	snprintf(path, sizeof path, "/dev/nvidia%d", minor);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 1;
	}
	return errno == ENXIO;
}

int main(void)
{
	unsigned last = ~0u;
	struct timespec nap = {0, 500000};
	for (;;) {
		unsigned set = 0;
		for (int i = 0; i < MAX_GPUS; i++)
			if (usable(i))
				set |= 1u << i;
		if (set != last) {
			struct timespec now;
			clock_gettime(CLOCK_REALTIME, &now);
			char list[128] = "";
			size_t n = 0;
			int count = 0;
			for (int i = 0; i < MAX_GPUS; i++)
				if (set & (1u << i)) {
					n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", count ? "," : "", i);
					count++;
				}
			printf("%lld %d %s\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec, count,
			       count ? list : "-");
			fflush(stdout);
			last = set;
		}
		nanosleep(&nap, NULL);
	}
}
