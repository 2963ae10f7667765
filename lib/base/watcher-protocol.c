/* The watcher protocol (watcher-protocol.h): the messages between pcinumad and
 * pcinuma-watcher, written from typed structs and read back into them.
 * Pure: no I/O; the framing is frame.c's. */
#include "watcher-protocol.h"

#include <errno.h>

#include "frame.h"
#include "util.h"

static const char *const type_names[] = {
        [WPROTO_PLAN] = "plan",
        [WPROTO_FORGET] = "forget",
        [WPROTO_STATUS] = "status",
        [WPROTO_PLANNED] = "planned",
        [WPROTO_RECHECK] = "recheck",
        [WPROTO_DOMAINS] = "domains",
        [WPROTO_DOMAIN] = "domain",
        [WPROTO_PLAN_RESTART] = "plan_restart",
        [WPROTO_RESTARTED] = "restarted",
        [WPROTO_RESTART] = "restart",
};

/* How an error names each kind ("a plan request without …"). */
static const char *const kind_names[] = {
        [WPROTO_PLAN] = "plan request",
        [WPROTO_FORGET] = "forget message",
        [WPROTO_STATUS] = "status message",
        [WPROTO_PLANNED] = "planned answer",
        [WPROTO_RECHECK] = "recheck request",
        [WPROTO_DOMAINS] = "domains message",
        [WPROTO_DOMAIN] = "domain message",
        [WPROTO_PLAN_RESTART] = "restart plan request",
        [WPROTO_RESTARTED] = "restarted message",
        [WPROTO_RESTART] = "restart request",
};

static const char *const outcome_names[] = {
        [WPROTO_OUTCOME_RESTARTED] = "restarted",
        [WPROTO_OUTCOME_FALLBACK] = "fallback",
        [WPROTO_OUTCOME_LOST] = "lost",
        [WPROTO_OUTCOME_SKIPPED] = "skipped",
};

const char *wproto_outcome_to_string(enum wproto_outcome o) {
        return (size_t) o < ELEMENTSOF(outcome_names) ? outcome_names[o] : NULL;
}

const char *wproto_type_to_string(enum wproto_type t) {
        return (size_t) t < ELEMENTSOF(type_names) ? type_names[t] : NULL;
}

/* The status counters after last_error, in the order they are written. */
static const struct {
        const char *key;
        size_t offset;
} status_counters[] = {
        { "settle_ms", offsetof(struct wproto_status, settle_ms) },
        { "pending", offsetof(struct wproto_status, pending) },
        { "events", offsetof(struct wproto_status, events) },
        { "conflicts", offsetof(struct wproto_status, conflicts) },
        { "undone", offsetof(struct wproto_status, undone) },
        { "windows", offsetof(struct wproto_status, windows) },
        { "window_us_sum", offsetof(struct wproto_status, window_us_sum) },
        { "window_us_max", offsetof(struct wproto_status, window_us_max) },
};

/* ---- writing ------------------------------------------------------------ */

static json_object *new_msg(enum wproto_type t) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "type", json_object_new_string(type_names[t]));
        return o;
}

static json_object *new_count(uint64_t v) {
        return json_object_new_int64((int64_t) v);
}

static json_object *new_string_or_null(const char *s) {
        return s ? json_object_new_string(s) : NULL;
}

/* Frame o and drop it. */
static int finish(json_object *o, char **ret, size_t *ret_len) {
        int r = frame_encode(o, ret, ret_len);
        json_object_put(o);
        return r;
}

int wproto_encode_plan(const struct wproto_plan *m, char **ret, size_t *ret_len) {
        if (!m->xml || m->xml_len > INT32_MAX)
                return -EINVAL;
        json_object *o = new_msg(WPROTO_PLAN);
        json_object_object_add(o, "id", new_count(m->id));
        json_object_object_add(o, "xml", json_object_new_string_len(m->xml, (int) m->xml_len));
        return finish(o, ret, ret_len);
}

int wproto_encode_forget(const struct wproto_forget *m, char **ret, size_t *ret_len) {
        if (!m->uuid)
                return -EINVAL;
        json_object *o = new_msg(WPROTO_FORGET);
        json_object_object_add(o, "uuid", json_object_new_string(m->uuid));
        return finish(o, ret, ret_len);
}

int wproto_encode_status(const struct wproto_status *m, char **ret, size_t *ret_len) {
        json_object *o = new_msg(WPROTO_STATUS);
        json_object_object_add(o, "connected", json_object_new_boolean(m->connected));
        json_object_object_add(o, "redefinitions", new_count(m->redefinitions));
        json_object_object_add(o, "failures", new_count(m->failures));
        json_object_object_add(o, "last_error", new_string_or_null(m->last_error));
        if (m->has_counters)
                for (size_t i = 0; i < ELEMENTSOF(status_counters); i++) {
                        const uint64_t *v = (const uint64_t *) ((const char *) m + status_counters[i].offset);
                        json_object_object_add(o, status_counters[i].key, new_count(*v));
                }
        return finish(o, ret, ret_len);
}

int wproto_encode_planned(const struct wproto_planned *m, char **ret, size_t *ret_len) {
        if (m->prio < 0 || m->prio > 7 || (m->n_fields && !m->fields))
                return -EINVAL;
        for (size_t i = 0; i < m->n_fields; i++)
                if (!m->fields[i].key || !m->fields[i].value)
                        return -EINVAL;
        json_object *o = new_msg(WPROTO_PLANNED);
        json_object_object_add(o, "id", new_count(m->id));
        json_object_object_add(o, "redefine", json_object_new_boolean(m->redefine));
        if (m->error)
                json_object_object_add(o, "error", json_object_new_string(m->error));
        else
                json_object_object_add(o, "xml", new_string_or_null(m->xml));
        json_object_object_add(o, "summary", new_string_or_null(m->summary));
        json_object_object_add(o, "prio", json_object_new_int(m->prio));
        json_object *fields = json_object_new_array();
        for (size_t i = 0; i < m->n_fields; i++) {
                json_object *kv = json_object_new_array();
                json_object_array_add(kv, json_object_new_string(m->fields[i].key));
                json_object_array_add(kv, json_object_new_string(m->fields[i].value));
                json_object_array_add(fields, kv);
        }
        json_object_object_add(o, "fields", fields);
        return finish(o, ret, ret_len);
}

int wproto_encode_recheck(const struct wproto_recheck *m, char **ret, size_t *ret_len) {
        json_object *o = new_msg(WPROTO_RECHECK);
        if (m->uuid)
                json_object_object_add(o, "uuid", json_object_new_string(m->uuid));
        return finish(o, ret, ret_len);
}

int wproto_encode_domains(const struct wproto_domains *m, char **ret, size_t *ret_len) {
        if (m->n && !m->persistent)
                return -EINVAL;
        for (size_t i = 0; i < m->n; i++)
                if (!m->persistent[i])
                        return -EINVAL;
        json_object *o = new_msg(WPROTO_DOMAINS);
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < m->n; i++)
                json_object_array_add(a, json_object_new_string(m->persistent[i]));
        json_object_object_add(o, "persistent", a);
        return finish(o, ret, ret_len);
}

int wproto_encode_domain(const struct wproto_domain *m, char **ret, size_t *ret_len) {
        if (!m->uuid)
                return -EINVAL;
        json_object *o = new_msg(WPROTO_DOMAIN);
        json_object_object_add(o, "uuid", json_object_new_string(m->uuid));
        json_object_object_add(o, "persistent", json_object_new_boolean(m->persistent));
        return finish(o, ret, ret_len);
}

int wproto_encode_plan_restart(const struct wproto_plan_restart *m, char **ret, size_t *ret_len) {
        if (!m->uuid || !m->xml || m->xml_len > INT32_MAX)
                return -EINVAL;
        json_object *o = new_msg(WPROTO_PLAN_RESTART);
        json_object_object_add(o, "id", new_count(m->id));
        json_object_object_add(o, "uuid", json_object_new_string(m->uuid));
        json_object_object_add(o, "xml", json_object_new_string_len(m->xml, (int) m->xml_len));
        return finish(o, ret, ret_len);
}

int wproto_encode_restarted(const struct wproto_restarted *m, char **ret, size_t *ret_len) {
        if (!m->uuid || !wproto_outcome_to_string(m->outcome))
                return -EINVAL;
        json_object *o = new_msg(WPROTO_RESTARTED);
        json_object_object_add(o, "uuid", json_object_new_string(m->uuid));
        json_object_object_add(o, "outcome", json_object_new_string(outcome_names[m->outcome]));
        json_object_object_add(o, "unplanned_us", new_count(m->unplanned_us));
        json_object_object_add(o, "total_us", new_count(m->total_us));
        return finish(o, ret, ret_len);
}

int wproto_encode_restart(const struct wproto_restart *m, char **ret, size_t *ret_len) {
        if (!m->uuid || (m->n_files && !m->files))
                return -EINVAL;
        for (size_t i = 0; i < m->n_files; i++)
                if (!m->files[i])
                        return -EINVAL;
        json_object *o = new_msg(WPROTO_RESTART);
        json_object_object_add(o, "uuid", json_object_new_string(m->uuid));
        json_object_object_add(o, "window_ms", new_count(m->window_ms));
        json_object_object_add(o, "since_us", new_count(m->since_us));
        if (m->n_files) {
                json_object *a = json_object_new_array();
                for (size_t i = 0; i < m->n_files; i++)
                        json_object_array_add(a, json_object_new_string(m->files[i]));
                json_object_object_add(o, "files", a);
        }
        if (m->if_persistent)
                json_object_object_add(o, "if_persistent", json_object_new_boolean(true));
        return finish(o, ret, ret_len);
}

int wproto_encode(const struct wproto_msg *m, char **ret, size_t *ret_len) {
        switch (m->type) {
        case WPROTO_PLAN:
                return wproto_encode_plan(&m->plan, ret, ret_len);
        case WPROTO_FORGET:
                return wproto_encode_forget(&m->forget, ret, ret_len);
        case WPROTO_STATUS:
                return wproto_encode_status(&m->status, ret, ret_len);
        case WPROTO_PLANNED:
                return wproto_encode_planned(&m->planned, ret, ret_len);
        case WPROTO_RECHECK:
                return wproto_encode_recheck(&m->recheck, ret, ret_len);
        case WPROTO_DOMAINS:
                return wproto_encode_domains(&m->domains, ret, ret_len);
        case WPROTO_DOMAIN:
                return wproto_encode_domain(&m->domain, ret, ret_len);
        case WPROTO_PLAN_RESTART:
                return wproto_encode_plan_restart(&m->plan_restart, ret, ret_len);
        case WPROTO_RESTARTED:
                return wproto_encode_restarted(&m->restarted, ret, ret_len);
        case WPROTO_RESTART:
                return wproto_encode_restart(&m->restart, ret, ret_len);
        }
        return -EINVAL;
}

/* ---- reading ------------------------------------------------------------ */

/* One message being read: where errors go and how they name it. */
struct reader {
        json_object *o;
        enum wproto_type type;
        char **ret_error;
};

/* The value of key; NULL when it is absent or null. */
static json_object *get(const struct reader *rd, const char *key) {
        json_object *v = NULL;
        return json_object_object_get_ex(rd->o, key, &v) ? v : NULL;
}

static int missing(const struct reader *rd, const char *key) {
        return set_error(rd->ret_error, -EPROTO, "a %s without '%s'", kind_names[rd->type], key);
}

static int wrong(const struct reader *rd, const char *key, const char *what) {
        return set_error(rd->ret_error, -EPROTO, "a %s whose '%s' is not %s", kind_names[rd->type], key, what);
}

/* A string, or NULL when absent or null (then required is an error). */
static int read_string(const struct reader *rd, const char *key, bool required, const char **ret) {
        json_object *v = get(rd, key);
        if (!v) {
                *ret = NULL;
                return required ? missing(rd, key) : 0;
        }
        if (!json_object_is_type(v, json_type_string))
                return wrong(rd, key, "a string");
        *ret = json_object_get_string(v);
        return 0;
}

/* A count: an integer from 0 up.  *ret_present says whether it was there
 * (absent is an error unless ret_present is given). */
static int read_count(const struct reader *rd, const char *key, uint64_t *ret, bool *ret_present) {
        json_object *v = get(rd, key);
        if (ret_present)
                *ret_present = v != NULL;
        if (!v)
                return ret_present ? 0 : missing(rd, key);
        if (!json_object_is_type(v, json_type_int) || json_object_get_int64(v) < 0)
                return wrong(rd, key, "a count");
        *ret = (uint64_t) json_object_get_int64(v);
        return 0;
}

static int read_bool(const struct reader *rd, const char *key, bool *ret) {
        json_object *v = get(rd, key);
        if (!v)
                return missing(rd, key);
        if (!json_object_is_type(v, json_type_boolean))
                return wrong(rd, key, "a boolean");
        *ret = json_object_get_boolean(v);
        return 0;
}

static int decode_plan(const struct reader *rd, struct wproto_plan *ret) {
        json_object *xml = get(rd, "xml");
        if (!get(rd, "id") || !xml || !json_object_is_type(xml, json_type_string))
                return set_error(rd->ret_error, -EPROTO, "a plan request without id or xml");
        ret->xml = json_object_get_string(xml);
        ret->xml_len = (size_t) json_object_get_string_len(xml);
        return read_count(rd, "id", &ret->id, NULL);
}

static int decode_forget(const struct reader *rd, struct wproto_forget *ret) {
        return read_string(rd, "uuid", true, &ret->uuid);
}

static int decode_counters(const struct reader *rd, struct wproto_status *ret) {
        size_t n = 0;
        const char *absent = NULL;
        for (size_t i = 0; i < ELEMENTSOF(status_counters); i++) {
                uint64_t *v = (uint64_t *) ((char *) ret + status_counters[i].offset);
                bool present;
                int r = read_count(rd, status_counters[i].key, v, &present);
                if (r < 0)
                        return r;
                n += present;
                if (!present && !absent)
                        absent = status_counters[i].key;
        }
        if (n > 0 && absent)
                return missing(rd, absent);
        ret->has_counters = n > 0;
        return 0;
}

static int decode_status(const struct reader *rd, struct wproto_status *ret) {
        int r = read_bool(rd, "connected", &ret->connected);
        if (r >= 0)
                r = read_count(rd, "redefinitions", &ret->redefinitions, NULL);
        if (r >= 0)
                r = read_count(rd, "failures", &ret->failures, NULL);
        if (r >= 0)
                r = read_string(rd, "last_error", false, &ret->last_error);
        if (r >= 0)
                r = decode_counters(rd, ret);
        return r;
}

/* "fields": [[key, value], …], both strings; *ret_array is the caller's. */
static int decode_fields(const struct reader *rd, struct wproto_field **ret_array, size_t *ret_n) {
        json_object *a = get(rd, "fields");
        if (!a)
                return missing(rd, "fields");
        if (!json_object_is_type(a, json_type_array))
                return wrong(rd, "fields", "a list of [key, value] string pairs");
        size_t n = json_object_array_length(a);
        _cleanup_free_ struct wproto_field *v = n ? xcalloc(n, sizeof(*v)) : NULL;
        for (size_t i = 0; i < n; i++) {
                json_object *kv = json_object_array_get_idx(a, i), *k, *val;
                if (!json_object_is_type(kv, json_type_array) || json_object_array_length(kv) != 2 ||
                    !json_object_is_type(k = json_object_array_get_idx(kv, 0), json_type_string) ||
                    !json_object_is_type(val = json_object_array_get_idx(kv, 1), json_type_string))
                        return wrong(rd, "fields", "a list of [key, value] string pairs");
                v[i] = (struct wproto_field) { json_object_get_string(k), json_object_get_string(val) };
        }
        *ret_array = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

static int decode_planned(const struct reader *rd, struct wproto_planned *ret, struct wproto_field **ret_array) {
        json_object *prio = get(rd, "prio");
        int r = read_count(rd, "id", &ret->id, NULL);
        if (r >= 0)
                r = read_bool(rd, "redefine", &ret->redefine);
        if (r >= 0)
                r = read_string(rd, "xml", false, &ret->xml);
        if (r >= 0)
                r = read_string(rd, "error", false, &ret->error);
        if (r >= 0 && ret->xml && ret->error)
                r = set_error(rd->ret_error, -EPROTO, "a planned answer with both 'xml' and 'error'");
        if (r >= 0)
                r = read_string(rd, "summary", false, &ret->summary);
        if (r >= 0 && !prio)
                r = missing(rd, "prio");
        if (r >= 0 && (!json_object_is_type(prio, json_type_int) || json_object_get_int64(prio) < 0 ||
                       json_object_get_int64(prio) > 7))
                r = wrong(rd, "prio", "a priority (0-7)");
        if (r < 0)
                return r;
        ret->prio = json_object_get_int(prio);
        r = decode_fields(rd, ret_array, &ret->n_fields);
        ret->fields = *ret_array;
        return r;
}

static int decode_recheck(const struct reader *rd, struct wproto_recheck *ret) {
        return read_string(rd, "uuid", false, &ret->uuid);
}

/* A list of strings under key (what names them in an error); absent is
 * an error unless optional.  *ret_array is the caller's. */
static int read_strings(const struct reader *rd, const char *key, const char *what, bool optional,
                        const char ***ret_array, size_t *ret_n) {
        json_object *a = get(rd, key);
        if (!a)
                return optional ? 0 : missing(rd, key);
        if (!json_object_is_type(a, json_type_array))
                return wrong(rd, key, what);
        size_t n = json_object_array_length(a);
        _cleanup_free_ const char **v = n ? xcalloc(n, sizeof(*v)) : NULL;
        for (size_t i = 0; i < n; i++) {
                json_object *u = json_object_array_get_idx(a, i);
                if (!json_object_is_type(u, json_type_string))
                        return wrong(rd, key, what);
                v[i] = json_object_get_string(u);
        }
        *ret_array = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

/* "persistent": ["…", …]. */
static int decode_domains(const struct reader *rd, struct wproto_domains *ret, const char ***ret_array) {
        int r = read_strings(rd, "persistent", "a list of UUID strings", false, ret_array, &ret->n);
        ret->persistent = *ret_array;
        return r;
}

static int decode_domain(const struct reader *rd, struct wproto_domain *ret) {
        int r = read_string(rd, "uuid", true, &ret->uuid);
        if (r >= 0)
                r = read_bool(rd, "persistent", &ret->persistent);
        return r;
}

static int decode_plan_restart(const struct reader *rd, struct wproto_plan_restart *ret) {
        json_object *xml = get(rd, "xml");
        int r = read_count(rd, "id", &ret->id, NULL);
        if (r >= 0)
                r = read_string(rd, "uuid", true, &ret->uuid);
        if (r >= 0 && !xml)
                r = missing(rd, "xml");
        if (r >= 0 && !json_object_is_type(xml, json_type_string))
                r = wrong(rd, "xml", "a string");
        if (r < 0)
                return r;
        ret->xml = json_object_get_string(xml);
        ret->xml_len = (size_t) json_object_get_string_len(xml);
        return 0;
}

static int decode_restarted(const struct reader *rd, struct wproto_restarted *ret) {
        const char *outcome = NULL;
        int r = read_string(rd, "uuid", true, &ret->uuid);
        if (r >= 0)
                r = read_string(rd, "outcome", true, &outcome);
        if (r < 0)
                return r;
        bool known = false;
        for (size_t i = 0; i < ELEMENTSOF(outcome_names); i++)
                if (streq(outcome, outcome_names[i])) {
                        ret->outcome = (enum wproto_outcome) i;
                        known = true;
                }
        if (!known)
                return wrong(rd, "outcome", "restarted, fallback, lost or skipped");
        r = read_count(rd, "unplanned_us", &ret->unplanned_us, NULL);
        if (r >= 0)
                r = read_count(rd, "total_us", &ret->total_us, NULL);
        return r;
}

static int decode_restart(const struct reader *rd, struct wproto_restart *ret, const char ***ret_array) {
        int r = read_string(rd, "uuid", true, &ret->uuid);
        if (r >= 0)
                r = read_count(rd, "window_ms", &ret->window_ms, NULL);
        if (r >= 0)
                r = read_count(rd, "since_us", &ret->since_us, NULL);
        if (r >= 0)
                r = read_strings(rd, "files", "a list of paths", true, ret_array, &ret->n_files);
        ret->files = *ret_array;
        if (r >= 0 && get(rd, "if_persistent"))
                r = read_bool(rd, "if_persistent", &ret->if_persistent);
        return r;
}

/* The type named by "type", or -EPROTO. */
static int decode_type(json_object *o, enum wproto_type *ret, char **ret_error) {
        json_object *t = NULL;
        const char *name = json_object_object_get_ex(o, "type", &t) && json_object_is_type(t, json_type_string)
                                   ? json_object_get_string(t) : NULL;
        for (size_t i = 0; name && i < ELEMENTSOF(type_names); i++)
                if (streq(name, type_names[i])) {
                        *ret = (enum wproto_type) i;
                        return 0;
                }
        return set_error(ret_error, -EPROTO, "a message of unknown type %s", name ? name : "(none)");
}

int wproto_decode(json_object *o, struct wproto_msg *ret, char **ret_error) {
        struct wproto_msg m = { .obj = NULL };
        if (!o || !json_object_is_type(o, json_type_object))
                return set_error(ret_error, -EPROTO, "a message that is not a JSON object");
        int r = decode_type(o, &m.type, ret_error);
        if (r < 0)
                return r;
        const struct reader rd = { o, m.type, ret_error };
        switch (m.type) {
        case WPROTO_PLAN:
                r = decode_plan(&rd, &m.plan);
                break;
        case WPROTO_FORGET:
                r = decode_forget(&rd, &m.forget);
                break;
        case WPROTO_STATUS:
                r = decode_status(&rd, &m.status);
                break;
        case WPROTO_PLANNED:
                r = decode_planned(&rd, &m.planned, &m.field_array);
                break;
        case WPROTO_RECHECK:
                r = decode_recheck(&rd, &m.recheck);
                break;
        case WPROTO_DOMAINS:
                r = decode_domains(&rd, &m.domains, &m.string_array);
                break;
        case WPROTO_DOMAIN:
                r = decode_domain(&rd, &m.domain);
                break;
        case WPROTO_PLAN_RESTART:
                r = decode_plan_restart(&rd, &m.plan_restart);
                break;
        case WPROTO_RESTARTED:
                r = decode_restarted(&rd, &m.restarted);
                break;
        case WPROTO_RESTART:
                r = decode_restart(&rd, &m.restart, &m.string_array);
                break;
        }
        if (r < 0) {
                free(m.field_array);
                free(m.string_array);
                return r;
        }
        m.obj = json_object_get(o);
        *ret = m;
        return 0;
}

void wproto_msg_done(struct wproto_msg *m) {
        if (!m)
                return;
        if (m->obj)
                json_object_put(m->obj);
        free(m->field_array);
        free(m->string_array);
        *m = (struct wproto_msg) { .obj = NULL };
}
