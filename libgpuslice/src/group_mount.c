/* SPDX-License-Identifier: Apache-2.0
 * The checks of a container's device group directories (group.c): the node's
 * read-only mounts, and UUIDs usable as a name in one directory. */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "group.h"

GS_HIDDEN int gs_uuid_name_ok(const char *uuid)
{
	if (uuid[0] == '\0')
		return 0;
	for (const char *c = uuid; *c != '\0'; c++)
		if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '-'))
			return 0;
	return 1;
}

GS_HIDDEN int gs_node_mount(const char *dir)
{
	struct statvfs vfs;
	struct statx sx, root;
	if (statvfs(dir, &vfs) != 0 || (vfs.f_flag & ST_RDONLY) == 0 ||
	    statx(AT_FDCWD, dir, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) != 0)
		return 0;
	if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
		return (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
	return statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS, &root) == 0 &&
	       (sx.stx_dev_major != root.stx_dev_major || sx.stx_dev_minor != root.stx_dev_minor);
}
