/* A failing disk for tests, loaded with LD_PRELOAD into the process under test.
 *
 * Once the file named by EIO_SHIM_TRIGGER exists, calls on files whose path starts with
 * EIO_SHIM_PATH fail with EIO instead of reaching the kernel:
 *   EIO_SHIM_CALLS=write  -> write, pwrite, pwritev, pwritev2 (nothing is written)
 *   EIO_SHIM_CALLS=fsync  -> fsync, fdatasync (the data reached the page cache, not the disk)
 * Remove the trigger file and the calls go through again. Everything else is passed through.
 * Built by tests/e2e/test_faults_disk.py with: cc -shared -fPIC -O2 -o eio_shim.so eio_shim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int failing(int fd, const char *kind) {
    const char *calls = getenv("EIO_SHIM_CALLS");
    const char *prefix = getenv("EIO_SHIM_PATH");
    const char *trigger = getenv("EIO_SHIM_TRIGGER");
    if (!calls || !prefix || !trigger || strcmp(calls, kind) != 0) return 0;
    if (access(trigger, F_OK) != 0) return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return strncmp(path, prefix, strlen(prefix)) == 0;
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

ssize_t write(int fd, const void *buf, size_t count) {
    if (failing(fd, "write")) { errno = EIO; return -1; }
    return NEXT(write)(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    if (failing(fd, "write")) { errno = EIO; return -1; }
    return NEXT(pwrite)(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    if (failing(fd, "write")) { errno = EIO; return -1; }
    return NEXT(pwrite64)(fd, buf, count, offset);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    if (failing(fd, "write")) { errno = EIO; return -1; }
    return NEXT(pwritev)(fd, iov, iovcnt, offset);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    if (failing(fd, "write")) { errno = EIO; return -1; }
    return NEXT(pwritev64)(fd, iov, iovcnt, offset);
}

/* CPython's os.pwritev calls pwritev64v2 (glibc >= 2.26) */
ssize_t pwritev2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    if (failing(fd, "write")) { errno = EIO; return -1; }
    return NEXT(pwritev2)(fd, iov, iovcnt, offset, flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int iovcnt, off_t offset, int flags) {
    if (failing(fd, "write")) { errno = EIO; return -1; }
    return NEXT(pwritev64v2)(fd, iov, iovcnt, offset, flags);
}

int fsync(int fd) {
    if (failing(fd, "fsync")) { errno = EIO; return -1; }
    return NEXT(fsync)(fd);
}

int fdatasync(int fd) {
    if (failing(fd, "fsync")) { errno = EIO; return -1; }
    return NEXT(fdatasync)(fd);
}
