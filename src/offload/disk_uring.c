/* The io_uring path of the disk store (compiled only when liburing is found). */
#include "hp/core.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

/* Declared in disk.c too; internal to the disk store. */
typedef struct hp__uring hp__uring;
int hp__uring_init(hp__uring **out, unsigned depth);
void hp__uring_exit(hp__uring *u);
int hp__uring_submit(hp__uring *u, int fd, bool write, void *buf, size_t len, uint64_t off,
                     uint64_t tag);
int hp__uring_wait(hp__uring *u, uint64_t *tag, int *res);

struct hp__uring {
    struct io_uring ring;
};

int hp__uring_init(hp__uring **out, unsigned depth) {
    *out = NULL;
    hp__uring *u = calloc(1, sizeof *u);
    if (!u) return -ENOMEM;
    int rc = io_uring_queue_init(depth, &u->ring, 0);
    if (rc < 0) {
        free(u);
        return rc;
    }
    *out = u;
    return 0;
}

void hp__uring_exit(hp__uring *u) {
    if (!u) return;
    io_uring_queue_exit(&u->ring);
    free(u);
}

/* Queues one read or write and submits it. Returns 0 or -errno (-EBUSY when the ring is full). */
int hp__uring_submit(hp__uring *u, int fd, bool write, void *buf, size_t len, uint64_t off,
                     uint64_t tag) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) return -EBUSY;
    if (len > 0x7ffff000u) len = 0x7ffff000u; /* the kernel's per-request limit; the rest is resubmitted */
    if (write) io_uring_prep_write(sqe, fd, buf, (unsigned)len, off);
    else io_uring_prep_read(sqe, fd, buf, (unsigned)len, off);
    io_uring_sqe_set_data64(sqe, tag);
    int rc;
    do {
        rc = io_uring_submit(&u->ring);
    } while (rc == -EINTR);
    return rc < 0 ? rc : 0;
}

/* Waits for one completion: its tag and result (bytes or -errno). Returns 0 or -errno. */
int hp__uring_wait(hp__uring *u, uint64_t *tag, int *res) {
    struct io_uring_cqe *cqe = NULL;
    int rc;
    do {
        rc = io_uring_wait_cqe(&u->ring, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) return rc;
    *tag = io_uring_cqe_get_data64(cqe);
    *res = cqe->res;
    io_uring_cqe_seen(&u->ring, cqe);
    return 0;
}
