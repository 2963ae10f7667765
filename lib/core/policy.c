/* The policy file: parse /etc/pcinuma/policy.json into a struct policy,
 * and decide which settings apply to a domain.  Parsing is strict on
 * purpose: a typo in a key or a policy name must fail loudly at load time
 * rather than silently fall back to the default placement. */
#include "policy.h"

#include <assert.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <strings.h>

#include <json.h>

#include "json-cleanup.h"

#define POLICY_TIMEOUT_MS_DEFAULT 10000u
#define POLICY_TIMEOUT_MS_MAX 600000u
/* The restart window (docs/policy.md "restart_window_ms"): from the
 * prepare hook to the domain being up.  5 s covers a QEMU start with a few
 * GiB of guest memory and passthrough devices on an idle host (a start
 * under TCG takes 0.2-0.5 s here); a guest whose start takes longer
 * (hundreds of GiB pinned for VFIO) needs it raised. */
#define POLICY_RESTART_WINDOW_MS_DEFAULT 5000u
#define POLICY_RESTART_WINDOW_MS_MIN 100u
#define POLICY_RESTART_WINDOW_MS_MAX 600000u

static const char *const mode_table[_POLICY_MODE_MAX] = {
        [POLICY_OFF] = "off",
        [POLICY_LEGACY] = "legacy",
        [POLICY_PREFERRED] = "preferred",
        [POLICY_SOCKET] = "socket",
        [POLICY_REQUIRE] = "require",
};

#define MODE_NAMES "off, legacy, preferred, socket, require"

const char *policy_mode_to_string(enum policy_mode m) {
        if ((unsigned) m >= _POLICY_MODE_MAX)
                return NULL;
        return mode_table[m];
}

int policy_mode_from_string(const char *s, enum policy_mode *ret) {
        if (!s)
                return -EINVAL;

        /* Nova spells it "required"; accept that so admins can copy
         * flavor extra specs over. */
        if (streq(s, "required")) {
                if (ret)
                        *ret = POLICY_REQUIRE;
                return 0;
        }

        for (size_t i = 0; i < _POLICY_MODE_MAX; i++)
                if (streq(s, mode_table[i])) {
                        if (ret)
                                *ret = (enum policy_mode) i;
                        return 0;
                }

        return -EINVAL;
}

struct policy_settings policy_settings_default(enum policy_mode mode) {
        return (struct policy_settings) {
                .mode = mode,
                .topology = POLICY_TOPOLOGY_PATHS,
                .mirror_switches = true,
                .mirror_distances = true,
                .mmio64_auto = true,
                .io_port_check = true,
                .nccl_topology = true,
                /* migration: "refuse" (docs/policy.md "migration");
                 * "same-topology" is the fleet's opt-in. */
                .migration_same_topology = false,
                .first_start = POLICY_FIRST_START_RESTART,
                .transient_restart = false,
        };
}

const char *policy_first_start_to_string(enum policy_first_start f) {
        switch (f) {
        case POLICY_FIRST_START_RESTART:
                return "restart";
        case POLICY_FIRST_START_REFUSE:
                return "refuse";
        case POLICY_FIRST_START_ALLOW:
                return "allow";
        }
        return NULL;
}

static void policy_init_default(struct policy *p) {
        *p = (struct policy) {
                .def = policy_settings_default(POLICY_PREFERRED),
                .allow_domain_policy = false,
                .hook_timeout_ms = POLICY_TIMEOUT_MS_DEFAULT,
                .hook_on_unreachable = POLICY_UNREACHABLE_ALLOW,
                .restart_window_ms = POLICY_RESTART_WINDOW_MS_DEFAULT,
        };
}

struct policy *policy_new_default(void) {
        struct policy *p = xmalloc(sizeof(*p));
        policy_init_default(p);
        return p;
}

struct policy *policy_free(struct policy *p) {
        if (!p)
                return NULL;

        for (size_t i = 0; i < p->n_rules; i++) {
                free(p->rules[i].name_glob);
                free(p->rules[i].uuid);
                free(p->rules[i].tag);
        }
        free(p->rules);
        for (size_t i = 0; i < p->n_variant_drivers; i++)
                free(p->variant_drivers[i]);
        free(p->variant_drivers);
        for (size_t i = 0; i < p->n_pool; i++)
                free(p->pool[i].text);
        free(p->pool);
        free(p);
        return NULL;
}

/* Where errors go: the file name for the message, and the caller's
 * error string. */
struct parse_ctx {
        const char *source;
        char **ret_error;
};

static int parse_error(const struct parse_ctx *c, const char *path, const char *fmt, ...) _printf_(3, 4);
static int parse_error(const struct parse_ctx *c, const char *path, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        _cleanup_free_ char *msg = xvasprintf(fmt, ap);
        va_end(ap);

        return set_error(c->ret_error, -EINVAL, "%s: %s: %s", c->source, path, msg);
}

/* json-c's own names say "int" and "double"; admins write JSON, where
 * both are numbers, so name them the way the JSON spec does. */
static const char *json_kind(json_object *v) {
        switch (json_object_get_type(v)) {
        case json_type_null:
                return "null";
        case json_type_boolean:
                return "boolean";
        case json_type_double:
                return "number";
        case json_type_int:
                return "integer";
        case json_type_object:
                return "object";
        case json_type_array:
                return "array";
        case json_type_string:
                return "string";
        }
        return "unknown";
}

static int expect_type(const struct parse_ctx *c, const char *path, json_object *v,
                       enum json_type type, const char *what) {
        /* A JSON null is a NULL json_object, whose type is json_type_null. */
        if (json_object_get_type(v) == type)
                return 0;
        return parse_error(c, path, "expected %s, got %s", what, json_kind(v));
}

/* A string value.  json-c allows "\u0000" inside strings, which a C string
 * would silently cut short, so refuse it. */
static int get_string(const struct parse_ctx *c, const char *path, json_object *v, const char **ret) {
        int r = expect_type(c, path, v, json_type_string, "a string");
        if (r < 0)
                return r;

        const char *s = json_object_get_string(v);
        if (strlen(s) != (size_t) json_object_get_string_len(v))
                return parse_error(c, path, "string contains a NUL character");

        *ret = s;
        return 0;
}

static int get_nonempty_string(const struct parse_ctx *c, const char *path, json_object *v, const char **ret) {
        const char *s = NULL;
        int r = get_string(c, path, v, &s);
        if (r < 0)
                return r;
        if (s[0] == 0)
                return parse_error(c, path, "expected a non-empty string");
        *ret = s;
        return 0;
}

/* Reject keys we do not know, in file order, so that "polcy" is reported
 * instead of a confusing "missing key 'policy'". */
static int check_keys(const struct parse_ctx *c, const char *path, json_object *o,
                      const char *const *allowed, size_t n_allowed) {
        struct json_object_iterator it = json_object_iter_begin(o);
        struct json_object_iterator end = json_object_iter_end(o);

        for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
                const char *key = json_object_iter_peek_name(&it);
                bool known = false;

                for (size_t i = 0; i < n_allowed; i++)
                        if (streq(key, allowed[i])) {
                                known = true;
                                break;
                        }
                if (!known)
                        return parse_error(c, path, "unknown key '%s'", key);
        }
        return 0;
}

/* An object with only the keys in allowed: the type, then each key. */
static int expect_object(const struct parse_ctx *c, const char *path, json_object *o,
                         const char *const *allowed, size_t n_allowed) {
        int r = expect_type(c, path, o, json_type_object, "an object");
        if (r < 0)
                return r;
        return check_keys(c, path, o, allowed, n_allowed);
}

static char *child_path(const char *path, const char *key) {
        return xasprintf("%s.%s", path, key);
}

static int parse_mode(const struct parse_ctx *c, const char *path, json_object *v, enum policy_mode *ret) {
        const char *s = NULL;
        int r = get_string(c, path, v, &s);
        if (r < 0)
                return r;

        if (policy_mode_from_string(s, ret) < 0)
                return parse_error(c, path, "unknown policy '%s' (expected " MODE_NAMES ")", s);
        return 0;
}

/* The feature switches, shared by "default" and the rules: each is
 * optional and overrides what *ret already holds. */
#define FEATURE_KEYS "topology", "mirror_switches", "mirror_distances", "mmio64", "io_port_check", "managed", "nccl_topology", "gpudirect_clique", "migration", \
                     "first_start", "transient"

static int parse_bool_key(const struct parse_ctx *c, const char *path, json_object *o, const char *key, bool *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v))
                return 0;
        _cleanup_free_ char *p = child_path(path, key);
        int r = expect_type(c, p, v, json_type_boolean, "a boolean");
        if (r < 0)
                return r;
        *ret = json_object_get_boolean(v);
        return 0;
}

static int parse_auto_off_key(const struct parse_ctx *c, const char *path, json_object *o, const char *key, bool *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, key, &v))
                return 0;
        _cleanup_free_ char *p = child_path(path, key);
        const char *s = NULL;
        int r = get_string(c, p, v, &s);
        if (r < 0)
                return r;
        if (streq(s, "auto"))
                *ret = true;
        else if (streq(s, "off"))
                *ret = false;
        else
                return parse_error(c, p, "expected \"auto\" or \"off\", not '%s'", s);
        return 0;
}

/* "migration": "same-topology" | "refuse" (docs/policy.md "migration"). */
static int parse_migration_key(const struct parse_ctx *c, const char *path, json_object *o, bool *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, "migration", &v))
                return 0;
        _cleanup_free_ char *p = child_path(path, "migration");
        const char *s = NULL;
        int r = get_string(c, p, v, &s);
        if (r < 0)
                return r;
        if (streq(s, "same-topology"))
                *ret = true;
        else if (streq(s, "refuse"))
                *ret = false;
        else
                return parse_error(c, p, "expected \"same-topology\" or \"refuse\", not '%s'", s);
        return 0;
}

/* "first_start": "restart" | "refuse" | "allow" (docs/policy.md "first_start"). */
static int parse_first_start_key(const struct parse_ctx *c, const char *path, json_object *o,
                                 enum policy_first_start *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, "first_start", &v))
                return 0;
        _cleanup_free_ char *p = child_path(path, "first_start");
        const char *s = NULL;
        int r = get_string(c, p, v, &s);
        if (r < 0)
                return r;
        if (streq(s, "restart"))
                *ret = POLICY_FIRST_START_RESTART;
        else if (streq(s, "refuse"))
                *ret = POLICY_FIRST_START_REFUSE;
        else if (streq(s, "allow"))
                *ret = POLICY_FIRST_START_ALLOW;
        else
                return parse_error(c, p, "expected \"restart\", \"refuse\" or \"allow\", not '%s'", s);
        return 0;
}

/* "transient": "restart" | "leave" (docs/policy.md "transient"). */
static int parse_transient_key(const struct parse_ctx *c, const char *path, json_object *o, bool *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, "transient", &v))
                return 0;
        _cleanup_free_ char *p = child_path(path, "transient");
        const char *s = NULL;
        int r = get_string(c, p, v, &s);
        if (r < 0)
                return r;
        if (streq(s, "restart"))
                *ret = true;
        else if (streq(s, "leave"))
                *ret = false;
        else
                return parse_error(c, p, "expected \"restart\" or \"leave\", not '%s'", s);
        return 0;
}

const char *policy_topology_to_string(enum policy_topology t) {
        return t == POLICY_TOPOLOGY_CELLS ? "cells" : "paths";
}

/* "topology": "paths" | "cells".  It also sets mirror_switches (on for
 * paths, off for cells: the cells shape is the pre-paths layout), unless
 * the same object sets mirror_switches itself. */
static int parse_topology_key(const struct parse_ctx *c, const char *path, json_object *o, struct policy_settings *ret) {
        json_object *v;
        if (!json_object_object_get_ex(o, "topology", &v))
                return 0;
        _cleanup_free_ char *p = child_path(path, "topology");
        const char *s = NULL;
        int r = get_string(c, p, v, &s);
        if (r < 0)
                return r;
        if (streq(s, "paths"))
                ret->topology = POLICY_TOPOLOGY_PATHS;
        else if (streq(s, "cells"))
                ret->topology = POLICY_TOPOLOGY_CELLS;
        else
                return parse_error(c, p, "expected \"paths\" or \"cells\", not '%s'", s);
        ret->mirror_switches = ret->topology == POLICY_TOPOLOGY_PATHS;
        return 0;
}

static int parse_features(const struct parse_ctx *c, const char *path, json_object *o, struct policy_settings *ret) {
        int r;
        if ((r = parse_topology_key(c, path, o, ret)) < 0 ||
            (r = parse_bool_key(c, path, o, "mirror_switches", &ret->mirror_switches)) < 0 ||
            (r = parse_bool_key(c, path, o, "mirror_distances", &ret->mirror_distances)) < 0 ||
            (r = parse_auto_off_key(c, path, o, "mmio64", &ret->mmio64_auto)) < 0 ||
            (r = parse_bool_key(c, path, o, "io_port_check", &ret->io_port_check)) < 0 ||
            (r = parse_auto_off_key(c, path, o, "managed", &ret->managed_auto)) < 0 ||
            (r = parse_bool_key(c, path, o, "nccl_topology", &ret->nccl_topology)) < 0 ||
            (r = parse_auto_off_key(c, path, o, "gpudirect_clique", &ret->gpudirect_clique_auto)) < 0 ||
            (r = parse_migration_key(c, path, o, &ret->migration_same_topology)) < 0 ||
            (r = parse_first_start_key(c, path, o, &ret->first_start)) < 0 ||
            (r = parse_transient_key(c, path, o, &ret->transient_restart)) < 0)
                return r;
        return 0;
}

static int parse_default(const struct parse_ctx *c, json_object *v, struct policy_settings *ret) {
        static const char *const keys[] = { "policy", FEATURE_KEYS };
        json_object *m;
        int r;

        r = expect_object(c, "default", v, keys, ELEMENTSOF(keys));
        if (r < 0)
                return r;

        /* "policy" is optional here: later settings (feature switches) may
         * be set in "default" while the placement stays the built-in one. */
        if (json_object_object_get_ex(v, "policy", &m)) {
                r = parse_mode(c, "default.policy", m, &ret->mode);
                if (r < 0)
                        return r;
        }
        return parse_features(c, "default", v, ret);
}


static int parse_match(const struct parse_ctx *c, const char *path, json_object *v, struct policy_rule *rule) {
        static const char *const keys[] = { "name", "uuid", "tag" };
        char **fields[] = { &rule->name_glob, &rule->uuid, &rule->tag };
        bool any = false;
        int r;

        r = expect_object(c, path, v, keys, ELEMENTSOF(keys));
        if (r < 0)
                return r;

        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                json_object *f;
                const char *s = NULL;

                if (!json_object_object_get_ex(v, keys[i], &f))
                        continue;

                _cleanup_free_ char *p = child_path(path, keys[i]);
                r = get_nonempty_string(c, p, f, &s);
                if (r < 0)
                        return r;
                /* libvirt prints a domain's UUID in the 8-4-4-4-12 form: anything
                 * else could never match, so say so at load time. */
                if (fields[i] == &rule->uuid && !uuid_is_valid(s))
                        return parse_error(c, p, "'%s' is not a UUID (expected the form "
                                           "01234567-89ab-cdef-0123-456789abcdef)", s);
                *fields[i] = xstrdup(s);
                any = true;
        }

        /* A rule that matches everything would shadow every later rule and
         * the default; that is what "default" is for. */
        if (!any)
                return parse_error(c, path, "expected at least one of name, uuid, tag");
        return 0;
}

static int parse_rule(const struct parse_ctx *c, size_t idx, json_object *v, const struct policy_settings *def,
                      struct policy_rule *rule) {
        static const char *const keys[] = { "match", "policy", FEATURE_KEYS };
        _cleanup_free_ char *path = xasprintf("rules[%zu]", idx);
        json_object *m;
        int r;

        r = expect_object(c, path, v, keys, ELEMENTSOF(keys));
        if (r < 0)
                return r;

        if (!json_object_object_get_ex(v, "match", &m))
                return parse_error(c, path, "missing key 'match'");
        _cleanup_free_ char *match_path = child_path(path, "match");
        r = parse_match(c, match_path, m, rule);
        if (r < 0)
                return r;

        if (!json_object_object_get_ex(v, "policy", &m))
                return parse_error(c, path, "missing key 'policy'");
        _cleanup_free_ char *policy_path = child_path(path, "policy");
        /* A rule's feature switches start from the default's. */
        rule->settings = *def;
        r = parse_mode(c, policy_path, m, &rule->settings.mode);
        if (r < 0)
                return r;
        return parse_features(c, path, v, &rule->settings);
}

static int parse_rules(const struct parse_ctx *c, json_object *v, struct policy *p) {
        int r = expect_type(c, "rules", v, json_type_array, "an array");
        if (r < 0)
                return r;

        size_t n = json_object_array_length(v);
        for (size_t i = 0; i < n; i++) {
                /* GROW zeroes the new element, so policy_free() copes with a
                 * rule that failed half way. */
                struct policy_rule *rule = GROW(p->rules, p->n_rules);

                r = parse_rule(c, i, json_object_array_get_idx(v, i), &p->def, rule);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int parse_hook(const struct parse_ctx *c, json_object *v, struct policy *p) {
        static const char *const keys[] = { "timeout_ms", "on_unreachable" };
        json_object *m;
        int r;

        r = expect_object(c, "hook", v, keys, ELEMENTSOF(keys));
        if (r < 0)
                return r;

        if (json_object_object_get_ex(v, "timeout_ms", &m)) {
                r = expect_type(c, "hook.timeout_ms", m, json_type_int, "an integer");
                if (r < 0)
                        return r;

                /* json-c clamps integers beyond int64 to its limits, which
                 * the range check below rejects as well. */
                int64_t t = json_object_get_int64(m);
                if (t < 1 || t > POLICY_TIMEOUT_MS_MAX)
                        return parse_error(c, "hook.timeout_ms", "%" PRId64 " is out of range (expected 1..%u)",
                                           t, POLICY_TIMEOUT_MS_MAX);
                p->hook_timeout_ms = (unsigned) t;
        }

        if (json_object_object_get_ex(v, "on_unreachable", &m)) {
                const char *s = NULL;

                r = get_string(c, "hook.on_unreachable", m, &s);
                if (r < 0)
                        return r;
                if (streq(s, "allow"))
                        p->hook_on_unreachable = POLICY_UNREACHABLE_ALLOW;
                else if (streq(s, "refuse"))
                        p->hook_on_unreachable = POLICY_UNREACHABLE_REFUSE;
                else
                        return parse_error(c, "hook.on_unreachable", "unknown value '%s' (expected allow, refuse)", s);
        }
        return 0;
}

/* Byte offset -> "line L, column C", both 1-based.  Columns count
 * characters, not bytes, so they match what an editor shows for UTF-8. */
static void offset_to_line_column(const char *buf, size_t len, size_t offset, unsigned *ret_line, unsigned *ret_col) {
        unsigned line = 1, col = 1;

        if (offset > len)
                offset = len;
        for (size_t i = 0; i < offset; i++) {
                unsigned char ch = (unsigned char) buf[i];

                if (ch == '\n') {
                        line++;
                        col = 1;
                } else if ((ch & 0xC0) != 0x80)
                        col++;
        }
        *ret_line = line;
        *ret_col = col;
}

static int syntax_error(const struct parse_ctx *c, const char *buf, size_t len, size_t offset, const char *what) {
        unsigned line, col;

        offset_to_line_column(buf, len, offset, &line, &col);
        return set_error(c->ret_error, -EINVAL, "%s: line %u, column %u: JSON syntax error: %s",
                         c->source, line, col, what);
}

/* Run json-c's tokener over the whole buffer.  Strict mode rejects what
 * JSON does not allow (comments, trailing commas, trailing garbage), so
 * a file that passes here also passes jq and editors' validators. */
static int tokenize(const struct parse_ctx *c, const char *buf, size_t len, json_object **ret) {
        _cleanup_(json_tokener_freep) struct json_tokener *tok = json_tokener_new();
        _cleanup_(json_object_putp) json_object *o = NULL;
        enum json_tokener_error e;
        size_t offset;

        if (!tok)
                abort();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);

        o = json_tokener_parse_ex(tok, buf, (int) len);
        e = json_tokener_get_error(tok);
        offset = json_tokener_get_parse_end(tok);

        if (e == json_tokener_continue) {
                /* The tokener cannot tell that a bare literal or number at
                 * the very end is complete, nor that an unclosed object
                 * never will be.  A NUL byte tells it the input is over. */
                o = json_tokener_parse_ex(tok, "", 1);
                e = json_tokener_get_error(tok);
                offset = len;
        }

        if (e != json_tokener_success)
                return syntax_error(c, buf, len, offset, json_tokener_error_desc(e));

        *ret = TAKE_PTR(o);
        return 0;
}

/* json-c keeps the last of two equal keys without a word, so a pasted
 * second "default" could silently turn enforcement off.  After json-c has
 * accepted the text (so it is valid JSON), walk it once more and refuse
 * any object that names a key twice.  Keys are compared as json-c sees
 * them, after their escapes are decoded: "d\u0065fault" is "default". */
struct key_level {
        char **keys;            /* decoded */
        size_t *key_len;
        size_t *key_off;        /* where each key's text starts in buf */
        size_t n;
        bool is_object;
        bool expect_key;
};

static void key_level_done(struct key_level *l) {
        for (size_t k = 0; k < l->n; k++)
                free(l->keys[k]);
        free(l->keys);
        free(l->key_len);
        free(l->key_off);
}

/* Decode one JSON string token (quotes included) the way json-c does, by
 * letting json-c parse it; it has accepted the whole text already, so this
 * cannot fail, but the raw text is kept if it does. */
static char *decode_key(struct json_tokener *tok, const char *token, size_t len, size_t *ret_len) {
        json_tokener_reset(tok);
        json_object *o = json_tokener_parse_ex(tok, token, (int) len);
        if (!o && json_tokener_get_error(tok) == json_tokener_continue)
                o = json_tokener_parse_ex(tok, "", 1);
        if (json_object_get_type(o) != json_type_string) {
                (void) json_object_put(o);
                *ret_len = len;
                return xstrndup(token, len);
        }
        size_t n = (size_t) json_object_get_string_len(o);
        char *r = xmalloc(n + 1);
        memcpy(r, json_object_get_string(o), n);
        r[n] = 0;
        (void) json_object_put(o);
        *ret_len = n;
        return r;
}

static int find_duplicate_key(const struct parse_ctx *c, const char *buf, size_t len) {
        _cleanup_(json_tokener_freep) struct json_tokener *tok = json_tokener_new();
        struct key_level st[64];
        int depth = -1, r = 0;

        if (!tok)
                abort();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);

        for (size_t i = 0; i < len && r == 0; i++) {
                char ch = buf[i];
                if (ch == '{' || ch == '[') {
                        if (depth + 1 >= (int) ELEMENTSOF(st))
                                break;          /* deeper than any policy; json-c has checked it */
                        st[++depth] = (struct key_level) { .is_object = ch == '{', .expect_key = ch == '{' };
                } else if (ch == '}' || ch == ']') {
                        if (depth >= 0)
                                key_level_done(&st[depth--]);
                } else if (ch == ',' && depth >= 0 && st[depth].is_object)
                        st[depth].expect_key = true;
                else if (ch == ':' && depth >= 0 && st[depth].is_object)
                        st[depth].expect_key = false;
                else if (ch == '"') {
                        size_t start = i + 1;
                        for (i++; i < len && buf[i] != '"'; i++)
                                if (buf[i] == '\\')
                                        i++;
                        if (depth < 0 || !st[depth].is_object || !st[depth].expect_key)
                                continue;
                        struct key_level *l = &st[depth];
                        size_t klen = i - start, dlen;
                        char *key = decode_key(tok, buf + start - 1, klen + 2, &dlen);
                        for (size_t k = 0; k < l->n; k++)
                                if (l->key_len[k] == dlen && memcmp(l->keys[k], key, dlen) == 0) {
                                        _cleanup_free_ char *raw = xstrndup(buf + start, klen);
                                        bool same_text = memcmp(buf + l->key_off[k], buf + start, klen) == 0 &&
                                                         buf[l->key_off[k] + klen] == '"';
                                        _cleanup_free_ char *first_raw = NULL;
                                        if (!same_text) {
                                                size_t e = l->key_off[k];
                                                while (e < len && buf[e] != '"')
                                                        e += buf[e] == '\\' ? 2 : 1;
                                                first_raw = xstrndup(buf + l->key_off[k], e - l->key_off[k]);
                                        }
                                        _cleanup_free_ char *what = same_text
                                                ? xasprintf("duplicate key '%s' in one object (JSON parsers would keep only the last)", raw)
                                                : xasprintf("duplicate key '%s' in one object: the same key as '%s' once "
                                                            "escapes are decoded (JSON parsers would keep only the last)",
                                                            raw, first_raw);
                                        r = syntax_error(c, buf, len, start - 1, what);
                                        break;
                                }
                        l->keys = xreallocarray(l->keys, l->n + 1, sizeof(char *));
                        l->key_len = xreallocarray(l->key_len, l->n + 1, sizeof(size_t));
                        l->key_off = xreallocarray(l->key_off, l->n + 1, sizeof(size_t));
                        l->keys[l->n] = key;
                        l->key_len[l->n] = dlen;
                        l->key_off[l->n] = start;
                        l->n++;
                }
        }
        for (; depth >= 0; depth--)
                key_level_done(&st[depth]);
        return r;
}

static bool all_hex(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') || (s[i] >= 'A' && s[i] <= 'F')))
                        return false;
        return true;
}

/* One passthrough_pool entry: a BDF, class:0x followed by 2, 4 or 6 hex
 * digits (a prefix of the 24-bit class), or vendor:device. */
static int parse_pool_entry(const char *s, struct policy_pool_entry *ret) {
        size_t l = strlen(s);
        uint64_t v;
        *ret = (struct policy_pool_entry) {0};
        if (strncmp(s, "class:0x", 8) == 0 && (l == 10 || l == 12 || l == 14) && all_hex(s + 8, l - 8) &&
            parse_uint(s + 8, 16, 0xffffff, &v) == 0) {
                unsigned shift = (unsigned) (14 - l) * 4;
                *ret = (struct policy_pool_entry) {
                        .kind = POLICY_POOL_CLASS, .class = (uint32_t) v << shift, .class_mask = (0xffffffu << shift) & 0xffffffu,
                };
                return 0;
        }
        if (l == 9 && s[4] == ':' && all_hex(s, 4) && all_hex(s + 5, 4)) {
                uint64_t vd, dv;
                _cleanup_free_ char *vendor = xstrndup(s, 4);
                if (parse_uint(vendor, 16, 0xffff, &vd) == 0 && parse_uint(s + 5, 16, 0xffff, &dv) == 0) {
                        *ret = (struct policy_pool_entry) {
                                .kind = POLICY_POOL_VENDOR_DEVICE, .vendor = (uint16_t) vd, .device = (uint16_t) dv,
                        };
                        return 0;
                }
        }
        struct pci_addr a;
        if (pci_addr_parse(s, &a) == 0) {
                *ret = (struct policy_pool_entry) { .kind = POLICY_POOL_BDF, .addr = a };
                return 0;
        }
        return -EINVAL;
}

static int parse_pool(struct parse_ctx *c, json_object *v, struct policy *p) {
        int r = expect_type(c, "passthrough_pool", v, json_type_array, "an array");
        if (r < 0)
                return r;
        for (size_t i = 0; i < json_object_array_length(v); i++) {
                _cleanup_free_ char *path = xasprintf("passthrough_pool[%zu]", i);
                const char *text = NULL;
                struct policy_pool_entry e;
                r = get_nonempty_string(c, path, json_object_array_get_idx(v, i), &text);
                if (r < 0)
                        return r;
                if (parse_pool_entry(text, &e) < 0)
                        return parse_error(c, path, "'%s' is not a PCI address (0000:3b:00.0), a class (class:0x03, "
                                           "class:0x0302 or class:0x030200) or a vendor:device pair (10de:2330)", text);
                e.text = xstrdup(text);
                *GROW(p->pool, p->n_pool) = e;
        }
        return 0;
}

const struct policy_pool_entry *policy_pool_find(const struct policy *p, const struct pci_addr *a, uint32_t class,
                                                 uint16_t vendor, uint16_t device) {
        for (size_t i = 0; p && i < p->n_pool; i++) {
                const struct policy_pool_entry *e = &p->pool[i];
                if ((e->kind == POLICY_POOL_BDF && pci_addr_eq(&e->addr, a)) ||
                    (e->kind == POLICY_POOL_CLASS && (class & e->class_mask) == e->class) ||
                    (e->kind == POLICY_POOL_VENDOR_DEVICE && e->vendor == vendor && e->device == device))
                        return e;
        }
        return NULL;
}

/* The policy file's text as a JSON object with only known top-level
 * keys, in *ret_root (the caller frees it, also on failure): rejects an
 * empty or oversized file, NUL bytes, bad syntax and duplicate keys, with
 * the error set as policy_parse's.  A UTF-8 byte order mark is skipped. */
static int parse_root(const struct parse_ctx *c, const char *buf, size_t len, json_object **ret_root) {
        static const char *const keys[] = { "default", "allow_domain_policy", "rules", "hook", "vfio_variant_drivers",
                                            "passthrough_pool", "restart_window_ms" };
        int r;

        if (len == 0)
                return set_error(c->ret_error, -EINVAL, "%s: empty file, expected a JSON object", c->source);

        if (len > POLICY_FILE_MAX)
                return set_error(c->ret_error, -EINVAL, "%s: too large (%zu bytes, the limit is %u)",
                                 c->source, len, POLICY_FILE_MAX);

        /* json-c stops at a NUL byte, which would hide whatever follows. */
        const char *nul = memchr(buf, 0, len);
        if (nul)
                return syntax_error(c, buf, len, (size_t) (nul - buf), "NUL byte");

        /* RFC 8259 lets parsers skip a byte order mark, and some editors
         * write one. */
        size_t skip = 0;
        if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0)
                skip = 3;

        size_t first = skip;
        while (first < len && strchr(" \t\r\n", buf[first]))
                first++;
        if (first == len)
                return set_error(c->ret_error, -EINVAL, "%s: empty file, expected a JSON object", c->source);

        r = tokenize(c, buf + skip, len - skip, ret_root);
        if (r < 0)
                return r;
        r = find_duplicate_key(c, buf + skip, len - skip);
        if (r < 0)
                return r;

        if (json_object_get_type(*ret_root) != json_type_object)
                return parse_error(c, "top level", "expected an object, got %s", json_kind(*ret_root));

        return check_keys(c, "top level", *ret_root, keys, ELEMENTSOF(keys));
}

/* "restart_window_ms": an integer in POLICY_RESTART_WINDOW_MS_MIN..MAX. */
static int parse_restart_window(const struct parse_ctx *c, json_object *v, struct policy *p) {
        int r = expect_type(c, "restart_window_ms", v, json_type_int, "an integer");
        if (r < 0)
                return r;
        int64_t t = json_object_get_int64(v);
        if (t < POLICY_RESTART_WINDOW_MS_MIN || t > POLICY_RESTART_WINDOW_MS_MAX)
                return parse_error(c, "restart_window_ms", "%" PRId64 " is out of range (expected %u..%u)",
                                   t, POLICY_RESTART_WINDOW_MS_MIN, POLICY_RESTART_WINDOW_MS_MAX);
        p->restart_window_ms = (unsigned) t;
        return 0;
}

/* "vfio_variant_drivers": an array of non-empty driver names. */
static int parse_variant_drivers(const struct parse_ctx *c, json_object *v, struct policy *p) {
        int r = expect_type(c, "vfio_variant_drivers", v, json_type_array, "an array");
        if (r < 0)
                return r;
        for (size_t i = 0; i < json_object_array_length(v); i++) {
                _cleanup_free_ char *path = xasprintf("vfio_variant_drivers[%zu]", i);
                const char *name = NULL;
                r = get_nonempty_string(c, path, json_object_array_get_idx(v, i), &name);
                if (r < 0)
                        return r;
                *GROW(p->variant_drivers, p->n_variant_drivers) = xstrdup(name);
        }
        return 0;
}

int policy_parse(const char *buf, size_t len, const char *source, struct policy **ret, char **ret_error) {
        struct parse_ctx c = {
                .source = source ? source : "policy",
                .ret_error = ret_error,
        };
        _cleanup_(json_object_putp) json_object *root = NULL;
        _cleanup_policy_ struct policy *p = NULL;
        json_object *v;
        int r;

        assert(buf || len == 0);
        assert(ret);

        r = parse_root(&c, buf, len, &root);
        if (r < 0)
                return r;

        p = policy_new_default();

        if (json_object_object_get_ex(root, "default", &v)) {
                r = parse_default(&c, v, &p->def);
                if (r < 0)
                        return r;
        }

        if (json_object_object_get_ex(root, "allow_domain_policy", &v)) {
                r = expect_type(&c, "allow_domain_policy", v, json_type_boolean, "a boolean");
                if (r < 0)
                        return r;
                p->allow_domain_policy = json_object_get_boolean(v);
        }

        if (json_object_object_get_ex(root, "rules", &v)) {
                r = parse_rules(&c, v, p);
                if (r < 0)
                        return r;
        }

        if (json_object_object_get_ex(root, "hook", &v)) {
                r = parse_hook(&c, v, p);
                if (r < 0)
                        return r;
        }

        if (json_object_object_get_ex(root, "restart_window_ms", &v)) {
                r = parse_restart_window(&c, v, p);
                if (r < 0)
                        return r;
        }

        if (json_object_object_get_ex(root, "vfio_variant_drivers", &v)) {
                r = parse_variant_drivers(&c, v, p);
                if (r < 0)
                        return r;
        }

        if (json_object_object_get_ex(root, "passthrough_pool", &v)) {
                r = parse_pool(&c, v, p);
                if (r < 0)
                        return r;
        }

        *ret = TAKE_PTR(p);
        return 0;
}

static bool rule_matches(const struct policy_rule *rule, const struct policy_subject *s) {
        if (rule->name_glob && (!s->name || fnmatch(rule->name_glob, s->name, 0) != 0))
                return false;
        if (rule->uuid && (!s->uuid || strcasecmp(rule->uuid, s->uuid) != 0))
                return false;
        if (rule->tag && (!s->tag || !streq(rule->tag, s->tag)))
                return false;
        return true;
}

static void describe_rule(struct strbuf *b, size_t idx, const struct policy_rule *rule) {
        const char *sep = "";

        strbuf_printf(b, "rule %zu (", idx + 1);
        if (rule->name_glob) {
                strbuf_printf(b, "%sname '%s'", sep, rule->name_glob);
                sep = ", ";
        }
        if (rule->uuid) {
                strbuf_printf(b, "%suuid '%s'", sep, rule->uuid);
                sep = ", ";
        }
        if (rule->tag)
                strbuf_printf(b, "%stag '%s'", sep, rule->tag);
        strbuf_append(b, ")");
}

void policy_resolve(const struct policy *p, const struct policy_subject *s,
                    struct policy_settings *ret, char **ret_origin) {
        static const struct policy_subject empty = { 0 };
        const struct policy_rule *match = NULL;
        size_t match_idx = 0;
        struct strbuf origin = { 0 };
        enum policy_mode requested;

        assert(p);
        assert(ret);

        if (!s)
                s = &empty;

        for (size_t i = 0; i < p->n_rules; i++)
                if (rule_matches(&p->rules[i], s)) {
                        match = &p->rules[i];
                        match_idx = i;
                        break;
                }

        *ret = match ? match->settings : p->def;

        if (match)
                describe_rule(&origin, match_idx, match);
        else
                strbuf_append(&origin, "default");

        /* The domain's own choice only counts when the admin allowed it;
         * otherwise say it was ignored, so the VM owner learns why. */
        if (s->requested) {
                if (!p->allow_domain_policy)
                        strbuf_printf(&origin, "; domain asked for '%s', ignored: allow_domain_policy is false",
                                      s->requested);
                else if (policy_mode_from_string(s->requested, &requested) < 0)
                        strbuf_printf(&origin, "; domain asked for '%s', not a policy, ignored", s->requested);
                else {
                        ret->mode = requested;
                        strbuf_done(&origin);
                        strbuf_append(&origin, "domain metadata (allowed by allow_domain_policy)");
                }
        }

        if (ret_origin)
                *ret_origin = strbuf_steal(&origin);
        else
                strbuf_done(&origin);
}
