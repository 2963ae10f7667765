/* noop-reader: the floor for the hook benchmarks.  It does what any libvirt
 * hook must do and nothing else: read the domain XML on stdin to the end
 * (libvirt's write must never meet a closed pipe) and exit 0.  Built like
 * pcinuma-hook (same compiler flags, dynamically linked against libc), so
 * the difference between the two is what pcinuma adds. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

int main(void) {
        static char buf[64 * 1024];

        for (;;) {
                ssize_t k = read(STDIN_FILENO, buf, sizeof(buf));

                if (k > 0)
                        continue;
                if (k < 0 && errno == EINTR)
                        continue;
                break;
        }
        return EXIT_SUCCESS;
}
