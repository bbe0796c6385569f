/* Internal: how a program binds its persistent tensors to a state store (program.c <-> store.c). */
#ifndef HP_RUNTIME_STORE_INTERNAL_H
#define HP_RUNTIME_STORE_INTERNAL_H

#include "hp/runtime.h"
#include "hp/store.h"

typedef struct hp__store_entry hp__store_entry;

typedef enum hp__store_bind_kind {
    HP__STORE_DIRECT = 0, /* the program uses the entry's device-tier buffer */
    HP__STORE_VIEW,       /* the program uses a view's buffer (read-only) */
    HP__STORE_COPY,       /* the program keeps its own buffer, refreshed from a slow-tier home */
    HP__STORE_HOME,       /* the program's pass (opts.ext) holds the entry on a slow tier */
} hp__store_bind_kind;

/* One bound tensor of a program. */
typedef struct hp__store_binding {
    hp__store_entry *e;
    hp_tid t;                  /* the program's tensor */
    hp__store_bind_kind kind;
    bool writes;               /* the program writes it in place */
    const hp_program_ext *ext; /* the program's opts.ext (may be NULL) */
    void *dst;                 /* COPY: the program's own buffer */
    size_t bytes;
    uint64_t seen;             /* the entry version this program last synced to (UINT64_MAX: never) */
} hp__store_binding;

/*
 * Binds tensor t (name, dt, this rank's `local` shape) of a program to store s; `ext_tier` is the
 * tier opts.ext keeps it on (HP_TIER_DEVICE: none), `writes` whether the program writes it in
 * place. With `dry` nothing in the store changes (hp_program_plan). On success *b describes the
 * binding and *data is the storage to use for DIRECT and VIEW (NULL otherwise, and when dry).
 * Errors: dtype or shape mismatch (HP_STATUS_SHAPE naming both), a second home or a writer of a
 * view or of a slow-tier entry it does not own (HP_STATUS_UNSUPPORTED), out of memory.
 */
hp_status hp__store_bind(hp_store *s, const char *name, hp_dtype dt, const hp_shape *local, hp_tier ext_tier,
                         const hp_program_ext *ext, hp_tid t, bool writes, bool dry, hp__store_binding *b,
                         void **data);

/* At the start of a run: bumps the versions of what the program writes; for what it reads, waits
 * for the writer's deferred work and refreshes COPY bindings (through backend `be`) when the
 * version moved. */
hp_status hp__store_before_run(hp_store *s, hp__store_binding *b, int n, hp_backend_t be);

/* Waits for the deferred work of the program that writes e (hp_program_ext.sync). */
hp_status hp__store_sync(hp__store_entry *e);

/* After hp_program_set_input on a bound tensor. */
void hp__store_bump(hp__store_entry *e);

/* Releases a program's bindings. With keep_values (a built program being freed) the entries it is
 * home of get their values copied into store memory; otherwise (a failed build) they lose storage. */
void hp__store_unbind(hp_store *s, hp__store_binding *b, int n, bool keep_values);

#endif
