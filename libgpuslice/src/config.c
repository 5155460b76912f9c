/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"

GS_HIDDEN int gs_parse_u64(const char *s, uint64_t *out)
{
	if (s == NULL || *s == '\0')
		return -1;
	uint64_t v = 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		uint64_t d = (uint64_t)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static void copy_env(char *dst, size_t n, const char *name)
{
	const char *v = getenv(name);
	dst[0] = '\0';
	if (v != NULL) {
		strncpy(dst, v, n - 1);
		dst[n - 1] = '\0';
	}
}

static struct {
	pthread_once_t once;
	struct gs_config cfg;
} cs = {.once = PTHREAD_ONCE_INIT};

static void config_init(void)
{
	struct gs_config *c = &cs.cfg;
	const char *log = getenv("GPUSLICE_LOG");
	c->log = !(log != NULL && strcmp(log, "0") == 0);
	copy_env(c->group, sizeof(c->group), "GPUSLICE_GROUP");
	copy_env(c->group_file, sizeof(c->group_file), "GPUSLICE_GROUP_FILE");
	const char *managed = getenv("GPUSLICE_GROUP_MANAGED");
	c->group_managed = managed != NULL && strcmp(managed, "1") == 0;
	/* A container's group file, mounted by the device plugin: the group is
	 * the node's choice, not the environment's. Made by the node, never here. */
	struct stat st;
	int saved = errno;
	if (stat(GS_CONTAINER_GROUP_FILE, &st) == 0 || errno != ENOENT) {
		strcpy(c->group_file, GS_CONTAINER_GROUP_FILE);
		c->group_managed = 1;
	}
	errno = saved;
	copy_env(c->limit_raw, sizeof(c->limit_raw), "GPUSLICE_MEMORY_LIMIT");
	const char *sock = getenv("GPUSLICE_NODE_SOCKET");
	if (sock != NULL && strlen(sock) < sizeof(c->node_socket))
		strcpy(c->node_socket, sock);
	const char *el = getenv("GPUSLICE_MEMORY_ELASTIC");
	if (el != NULL && strcmp(el, "on") == 0)
		c->elastic = GS_ELASTIC_ON;
	else if (el != NULL && strcmp(el, "spill") == 0)
		c->elastic = GS_ELASTIC_ON | GS_ELASTIC_SPILL;
	const char *wait = getenv("GPUSLICE_CONTEXT_WAIT_MS");
	uint64_t ms;
	c->context_wait_ms = wait != NULL && gs_parse_u64(wait, &ms) == 0 && ms <= GS_CONTEXT_WAIT_MAX_MS
				     ? (uint32_t)ms
				     : GS_CONTEXT_WAIT_MS;
	const char *limit = getenv("GPUSLICE_MEMORY_LIMIT");
	if (limit != NULL && *limit != '\0' && gs_parse_u64(limit, &c->limit) != 0) {
		c->limit_bad = 1;
		c->limit = 0;
	}
}

GS_HIDDEN const struct gs_config *gs_config(void)
{
	pthread_once(&cs.once, config_init);
	return &cs.cfg;
}
