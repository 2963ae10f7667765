/* The reference counts the manager and its hook jobs share (struct
 * shared, manager-internal.h): the host map and the policy a job decides
 * with stay alive until the last job that reads them is done, whatever
 * reloads and rescans replace them meanwhile. */
#include "manager-internal.h"

struct shared *shared_new(void *obj, void (*free_obj)(void *obj), uint64_t generation) {
        struct shared *s = xcalloc(1, sizeof(*s));
        *s = (struct shared) { .n_ref = 1, .obj = obj, .free_obj = free_obj, .generation = generation };
        return s;
}

struct shared *shared_ref(struct shared *s) {
        s->n_ref++;
        return s;
}

struct shared *shared_unref(struct shared *s) {
        if (s && --s->n_ref == 0) {
                s->free_obj(s->obj);
                free(s);
        }
        return NULL;
}

void shared_unrefp(struct shared **s) {
        shared_unref(*s);
}
