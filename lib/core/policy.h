/* The admin's policy file, /etc/pcinuma/policy.json (docs/design.md §6, §11):
 * which placement policy applies to which domain, and the hook settings.
 * Parsing is pure (a buffer in, a struct out, policy.c); the one function
 * that reads a file, policy_load_file(), is lib/host/policy-file.c's
 * (link host_dep). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "pciaddr.h"
#include "util.h"

/* A policy file is a few KiB; anything this big is a mistake, and we would
 * rather say so than parse it. */
#define POLICY_FILE_MAX (1024u * 1024u)

/* Ordered from weakest to strictest; values follow Nova's
 * hw:pci_numa_affinity_policy, plus 'off'. */
enum policy_mode {
        POLICY_OFF,
        POLICY_LEGACY,
        POLICY_PREFERRED,
        POLICY_SOCKET,
        POLICY_REQUIRE,
        _POLICY_MODE_MAX,
};

/* "off", "legacy", "preferred", "socket", "require". */
const char *policy_mode_to_string(enum policy_mode m);
/* Accepts the names above and the alias "required". 0 or -EINVAL. */
int policy_mode_from_string(const char *s, enum policy_mode *ret);

/* The shape of the guest tree (docs/policy.md "topology"). */
enum policy_topology {
        POLICY_TOPOLOGY_PATHS,  /* mirror the host's paths: a pxb per host root complex, switches, functions (default) */
        POLICY_TOPOLOGY_CELLS,  /* one pxb per guest cell, a root port per device */
};

const char *policy_topology_to_string(enum policy_topology t);

/* What the prepare gate does with a start whose layout is not the plan
 * (docs/policy.md "first_start"). */
enum policy_first_start {
        POLICY_FIRST_START_RESTART,     /* let it start, then restart it into the plan as soon as it is up (default) */
        POLICY_FIRST_START_REFUSE,      /* refuse it under require and socket (warn under preferred, legacy) */
        POLICY_FIRST_START_ALLOW,       /* let it start without the plan, with a warning */
};

/* "restart", "refuse", "allow". */
const char *policy_first_start_to_string(enum policy_first_start f);

/* What a rule (or the default) sets for a domain: the placement policy
 * and the feature switches (docs/policy.md). */
/* Each field of this struct must be compared in memo_same_policy() (memo.c),
 * or pcinumad may keep answering from its memo after it changed. */
struct policy_settings {
        enum policy_mode mode;
        enum policy_topology topology;/* default paths */
        bool mirror_switches;         /* devices sharing a host switch share a guest switch; default on (follows topology) */
        bool mirror_distances;        /* copy the host SLIT into <distances>; default on */
        bool mmio64_auto;             /* size the guest's 64-bit MMIO window; default on ("auto") */
        bool io_port_check;           /* check the guest's 64 KiB of I/O space; default on */
        bool managed_auto;            /* managed='no' for VFIO variant drivers; default off ("off") */
        bool nccl_topology;           /* give the guest its NCCL topology file as fw_cfg; default on */
        bool migration_same_topology; /* "migration": "same-topology" (true) or "refuse" (default, false) */
        bool gpudirect_clique_auto;   /* x-nv-gpudirect-clique ids for NVIDIA GPUs behind one host switch; default off ("off") */
        enum policy_first_start first_start; /* an unplanned start; default restart */
        bool transient_restart;       /* "transient": "restart" (true) or "leave" (false, default): may first_start
                                       * restart a transient domain, or does it get the refusal or warning? */
};

/* The defaults above, with the given mode. */
struct policy_settings policy_settings_default(enum policy_mode mode);

/* Each field of this struct must be compared in memo_same_policy() (memo.c),
 * or pcinumad may keep answering from its memo after it changed. */
struct policy_rule {
        /* Each non-NULL field must match (AND); at least one is set. */
        char *name_glob;        /* fnmatch(3) glob on the domain name */
        char *uuid;             /* exact, case-insensitive */
        char *tag;              /* the tag attribute of the domain's <pcinuma:policy> metadata */
        struct policy_settings settings;
};

enum policy_unreachable {
        POLICY_UNREACHABLE_ALLOW,
        POLICY_UNREACHABLE_REFUSE,
};

/* An entry of "passthrough_pool" (docs/policy.md): host devices that
 * the migration mapping may give an incoming guest although a host driver
 * holds them. */
enum policy_pool_kind {
        POLICY_POOL_BDF,                /* "0000:3b:00.0" */
        POLICY_POOL_CLASS,              /* "class:0x03", "class:0x0302", "class:0x030200" */
        POLICY_POOL_VENDOR_DEVICE,      /* "10de:2330" */
};

struct policy_pool_entry {
        char *text;                     /* as written, for messages */
        enum policy_pool_kind kind;
        struct pci_addr addr;           /* BDF */
        uint32_t class, class_mask;     /* CLASS: the 24-bit class, and which of its bits count */
        uint16_t vendor, device;        /* VENDOR_DEVICE */
};

/* Each field of this struct must be compared in memo_same_policy() (memo.c),
 * or pcinumad may keep answering from its memo after it changed. */
struct policy {
        struct policy_settings def;   /* "default" */
        bool allow_domain_policy;     /* may a domain's own <pcinuma:policy name=...> choose? */
        struct policy_rule *rules;
        size_t n_rules;
        unsigned hook_timeout_ms;     /* "hook": {"timeout_ms"} */
        char **variant_drivers;       /* "vfio_variant_drivers": extra VFIO variant driver names */
        size_t n_variant_drivers;
        struct policy_pool_entry *pool; /* "passthrough_pool" */
        size_t n_pool;
        enum policy_unreachable hook_on_unreachable;
        /* "restart_window_ms": a restart into the plan happens only if the
         * domain is up this long at most after its prepare hook call. */
        unsigned restart_window_ms;
};

/* What a domain tells about itself, for rule matching. Any field may be NULL. */
struct policy_subject {
        const char *name;
        const char *uuid;
        const char *tag;              /* <pcinuma:policy tag=...> */
        const char *requested;        /* <pcinuma:policy name=...> */
};

/* The built-in policy used when no file is given: default preferred, no rules. */
struct policy *policy_new_default(void);

/* Parse the JSON text buf[0..len).  'source' names the file in messages.
 * Unknown keys, wrong types and unknown policy names are errors, and
 * *ret_error names the file, the key path (e.g. "rules[1].policy") or the
 * line and column of a syntax error, and the problem.  Returns 0 or
 * -EINVAL; the caller owns *ret. */
int policy_parse(const char *buf, size_t len, const char *source, struct policy **ret, char **ret_error);

struct policy *policy_free(struct policy *p);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct policy *, policy_free)
#define _cleanup_policy_ _cleanup_(policy_freep)

/* The entry of p's passthrough_pool that names the host device at a, of
 * class 'class' and vendor:device, or NULL (also for a NULL p). */
const struct policy_pool_entry *policy_pool_find(const struct policy *p, const struct pci_addr *a, uint32_t class,
                                                 uint16_t vendor, uint16_t device);

/* The settings for a subject: the first matching rule, else the default.
 * If the policy allows it and the subject requests a valid mode, that mode
 * replaces the rule's.  *ret_origin (if non-NULL) gets a malloc'ed phrase
 * saying where the decision came from, e.g. "rule 2 (name 'gpu-*')",
 * "default", "domain metadata".  Never fails. */
void policy_resolve(const struct policy *p, const struct policy_subject *s,
                    struct policy_settings *ret, char **ret_origin);
