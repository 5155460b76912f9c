/* SPDX-License-Identifier: Apache-2.0
 * gs-pause: the pod sandbox process of the e2e images; sleeps until told to stop. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static void stop(int sig)
{
	(void)sig;
	_exit(0);
}

int main(void)
{
	signal(SIGTERM, stop);
	signal(SIGINT, stop);
	for (;;)
		pause();
}
