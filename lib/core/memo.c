/* The memo of prepare answers: its key, which answers it keeps, and its
 * table (memo.h says why it is sound).  Pure. */
#include "memo.h"

#include <string.h>

#include "sha256.h"
#include "util.h"

/* The digits of the root element's id='N': where they are in xml, when xml
 * begins with a <domain ...> start tag whose attributes read cleanly and
 * one of them is id with 1 to 20 digits as its value.  Anything else: no
 * digits left out.  Two documents are then given the same key only when
 * they differ in those digits alone, never in where they are or how many:
 * the length is in the key, and the scan reads only what comes before
 * them. */
static bool root_id_digits(const char *xml, size_t len, size_t *ret_at, size_t *ret_n) {
        static const char open_tag[] = "<domain";
        size_t i = sizeof open_tag - 1;
        if (!xml || len < i || memcmp(xml, open_tag, i) != 0)
                return false;
        for (;;) {
                size_t ws = i;
                while (i < len && strchr(" \t\r\n", xml[i]) && xml[i])
                        i++;
                if (i == len || xml[i] == '>' || xml[i] == '/' || i == ws)
                        return false;
                size_t name = i;
                while (i < len && ((xml[i] >= 'a' && xml[i] <= 'z') || (xml[i] >= 'A' && xml[i] <= 'Z') ||
                                   xml[i] == ':' || xml[i] == '_' || xml[i] == '-'))
                        i++;
                size_t name_len = i - name;
                if (name_len == 0 || i + 1 >= len || xml[i] != '=' || (xml[i + 1] != '\'' && xml[i + 1] != '"'))
                        return false;
                char q = xml[i + 1];
                size_t value = i + 2;
                const char *end = memchr(xml + value, q, len - value);
                if (!end)
                        return false;
                size_t value_len = (size_t) (end - xml) - value;
                if (memchr(xml + value, '<', value_len))
                        return false;
                if (name_len == 2 && memcmp(xml + name, "id", 2) == 0) {
                        if (value_len == 0 || value_len > 20)
                                return false;
                        for (size_t k = 0; k < value_len; k++)
                                if (xml[value + k] < '0' || xml[value + k] > '9')
                                        return false;
                        *ret_at = value;
                        *ret_n = value_len;
                        return true;
                }
                i = (size_t) (end - xml) + 1;
        }
}

static void add_u64(struct sha256_ctx *c, uint64_t v) {
        uint8_t b[8];
        for (int i = 0; i < 8; i++)
                b[i] = (uint8_t) (v >> (8 * i));
        sha256_add(c, b, sizeof b);
}

/* A part whose length comes first: no two sequences of parts hash alike. */
static void add_part(struct sha256_ctx *c, const char *s, size_t n) {
        add_u64(c, n);
        sha256_add(c, s, n);
}

void memo_key(const struct proto_request *req, uint64_t host_generation, uint64_t policy_generation,
              uint8_t ret[MEMO_KEY_SIZE]) {
        static const char domain[] = "pcinuma prepare memo 1";
        struct sha256_ctx c;
        sha256_begin(&c);
        add_part(&c, domain, sizeof domain);
        for (size_t i = 0; i < 4; i++)
                add_part(&c, req->argv[i] ? req->argv[i] : "", req->argv[i] ? strlen(req->argv[i]) : 0);
        add_u64(&c, req->xml != NULL);
        add_u64(&c, req->xml_not_utf8);
        add_u64(&c, (uint64_t) req->xml_invalid_utf8);
        size_t at = 0, n = 0;
        bool id = root_id_digits(req->xml, req->xml_len, &at, &n);
        add_u64(&c, req->xml_len);
        add_u64(&c, id);
        if (id) {
                /* The bytes around the digits; where they are and how many
                 * follows from the bytes before them and the length. */
                sha256_add(&c, req->xml, at);
                sha256_add(&c, req->xml + at + n, req->xml_len - at - n);
        } else if (req->xml)
                sha256_add(&c, req->xml, req->xml_len);
        add_u64(&c, host_generation);
        add_u64(&c, policy_generation);
        sha256_end(&c, ret);
}

bool memo_keeps(const struct decision *d) {
        if (!d->phase || !d->subphase || strcmp(d->phase, "prepare") != 0 || strcmp(d->subphase, "begin") != 0)
                return false;
        if (d->verdict != DECIDE_ALLOW && d->verdict != DECIDE_WARN)
                return false;
        /* The plan's answer: an error or a domain beyond the limits has
         * none. */
        const struct engine_result *r = d->result;
        if (!r || d->out || d->restart_if_persistent || d->n_boot_files)
                return false;
        switch (r->verdict) {
        case PLAN_UNCHANGED:
        case PLAN_SKIP:
                return true;
        case PLAN_APPLY:
                return r->already_planned;
        case PLAN_REFUSED:
                break;
        }
        return false;
}

void memo_init(struct memo *m, void (*free_value)(void *value)) {
        *m = (struct memo) { .free_value = free_value };
}

void memo_done(struct memo *m) {
        for (size_t i = 0; i < m->n; i++)
                if (m->free_value)
                        m->free_value(m->v[i].value);
        free(m->v);
        *m = (struct memo) { .free_value = m->free_value };
}

static struct memo_entry *find(struct memo *m, const uint8_t key[MEMO_KEY_SIZE]) {
        for (size_t i = 0; i < m->n; i++)
                if (memcmp(m->v[i].key, key, MEMO_KEY_SIZE) == 0)
                        return &m->v[i];
        return NULL;
}

void *memo_get(struct memo *m, const uint8_t key[MEMO_KEY_SIZE]) {
        struct memo_entry *e = find(m, key);
        if (e)
                m->hits++;
        else
                m->misses++;
        return e ? e->value : NULL;
}

void memo_put(struct memo *m, const uint8_t key[MEMO_KEY_SIZE], void *value) {
        struct memo_entry *e = find(m, key);
        if (!e && m->n < MEMO_CAPACITY) {
                if (!m->v)
                        m->v = xcalloc(MEMO_CAPACITY, sizeof(*m->v));
                e = &m->v[m->n++];
        } else if (!e) {
                e = &m->v[m->next];
                m->next = (m->next + 1) % MEMO_CAPACITY;
        }
        if (e->value && m->free_value)
                m->free_value(e->value);
        memcpy(e->key, key, MEMO_KEY_SIZE);
        e->value = value;
}
