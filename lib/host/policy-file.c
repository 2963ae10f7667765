/* The policy file's reader: open the file, read it whole (up to
 * POLICY_FILE_MAX) and hand it to the pure parser, policy_parse().  With
 * hostmap-sysfs.c, the only library code that reads files. */
#include "policy.h"
#include "policy-file.h"

#include <assert.h>
#include <fcntl.h>

#include "fileio.h"

int policy_load_file(const char *path, struct policy **ret, char **ret_error) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;

        assert(path);
        assert(ret);

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                int r = -errno;
                return set_error(ret_error, r, "%s: cannot read: %s", path, strerror(-r));
        }

        /* Reading until EOF rather than trusting st_size also works for
         * pipes and /dev/stdin. */
        int r = read_full_fd(fd, POLICY_FILE_MAX, &buf, &len);
        if (r == -EFBIG)
                return set_error(ret_error, r, "%s: file too large (over %u bytes)", path, POLICY_FILE_MAX);
        if (r < 0)
                return set_error(ret_error, r, "%s: cannot read: %s", path, strerror(-r));

        return policy_parse(buf, len, path, ret, ret_error);
}
