/* Logging to the journal or stderr.  The process-wide target is the one
 * piece of global state the daemon keeps: it is set once at start. */
#include "log.h"

#include <sys/uio.h>
#include <systemd/sd-journal.h>

static enum log_target target = LOG_TARGET_STDERR;
static const char *ident = "pcinumad";
static int max_level = LOG_DEBUG;

int log_target_from_string(const char *s, enum log_target *ret) {
        if (streq(s, "auto"))
                *ret = LOG_TARGET_AUTO;
        else if (streq(s, "journal"))
                *ret = LOG_TARGET_JOURNAL;
        else if (streq(s, "stderr"))
                *ret = LOG_TARGET_STDERR;
        else
                return -EINVAL;
        return 0;
}

void log_setup(enum log_target t, const char *identifier) {
        if (t == LOG_TARGET_AUTO)
                /* systemd sets JOURNAL_STREAM when stderr goes to the journal. */
                t = getenv("JOURNAL_STREAM") ? LOG_TARGET_JOURNAL : LOG_TARGET_STDERR;
        target = t;
        if (identifier)
                ident = identifier;
}

void log_set_max_level(int prio) {
        max_level = prio;
}

static const char *prio_prefix(int prio) {
        switch (prio) {
        case LOG_EMERG:
        case LOG_ALERT:
        case LOG_CRIT:
        case LOG_ERR:
                return "error: ";
        case LOG_WARNING:
                return "warning: ";
        default:
                return "";
        }
}

static void emit(int prio, const char *message_id, const struct log_fields *f, const char *msg) {
        if (prio > max_level)
                return;
        if (target == LOG_TARGET_JOURNAL) {
                size_t n = 3 + (message_id ? 1 : 0) + (f ? f->n : 0);
                _cleanup_free_ struct iovec *iov = xcalloc(n, sizeof(*iov));
                char **owned = xcalloc(n, sizeof(char *));
                size_t k = 0;
                owned[k] = xasprintf("MESSAGE=%s", msg);
                owned[k + 1] = xasprintf("PRIORITY=%d", prio);
                owned[k + 2] = xasprintf("SYSLOG_IDENTIFIER=%s", ident);
                k += 3;
                if (message_id)
                        owned[k++] = xasprintf("MESSAGE_ID=%s", message_id);
                for (size_t i = 0; f && i < f->n; i++)
                        owned[k++] = xasprintf("%s=%s", f->v[i].key, f->v[i].value);
                for (size_t i = 0; i < k; i++)
                        iov[i] = (struct iovec) { .iov_base = owned[i], .iov_len = strlen(owned[i]) };
                int r = sd_journal_sendv(iov, (int) k);
                for (size_t i = 0; i < k; i++)
                        free(owned[i]);
                free(owned);
                if (r >= 0)
                        return;
                /* No journal: fall through to stderr rather than lose it. */
        }

        struct strbuf b = {0};
        strbuf_printf(&b, "%s: %s%s", ident, prio_prefix(prio), msg);
        if (message_id || (f && f->n)) {
                strbuf_append(&b, " |");
                if (message_id)
                        strbuf_printf(&b, " MESSAGE_ID=%s", message_id);
                for (size_t i = 0; f && i < f->n; i++) {
                        const char *v = f->v[i].value;
                        bool quote = !*v || strpbrk(v, " \t\n\"\\") != NULL;
                        strbuf_printf(&b, " %s=", f->v[i].key);
                        if (!quote) {
                                strbuf_append(&b, v);
                                continue;
                        }
                        strbuf_append(&b, "\"");
                        for (const char *c = v; *c; c++) {
                                if (*c == '"' || *c == '\\')
                                        strbuf_appendn(&b, "\\", 1);
                                if (*c == '\n') {
                                        strbuf_append(&b, "\\n");
                                        continue;
                                }
                                strbuf_appendn(&b, c, 1);
                        }
                        strbuf_append(&b, "\"");
                }
        }
        strbuf_append(&b, "\n");
        (void) !write(STDERR_FILENO, b.buf, b.len);
        strbuf_done(&b);
}

void log_msg(int prio, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *msg = xvasprintf(fmt, ap);
        va_end(ap);
        emit(prio, NULL, NULL, msg);
}

int log_errno(int prio, int err, const char *fmt, ...) {
        /* Expand %m ourselves, doubling any '%' in the error text. */
        struct strbuf f = {0};
        const char *e = strerror(err < 0 ? -err : err);
        for (const char *p = fmt; *p; p++) {
                if (p[0] == '%' && p[1] == 'm') {
                        for (const char *q = e; *q; q++)
                                strbuf_append(&f, *q == '%' ? "%%" : (char[]) { *q, 0 });
                        p++;
                } else if (p[0] == '%' && p[1] == '%') {
                        strbuf_append(&f, "%%");
                        p++;
                } else
                        strbuf_appendn(&f, p, 1);
        }
        va_list ap;
        va_start(ap, fmt);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        _cleanup_free_ char *msg = xvasprintf(f.buf ? f.buf : "", ap);
#pragma GCC diagnostic pop
        va_end(ap);
        strbuf_done(&f);
        emit(prio, NULL, NULL, msg);
        return err;
}

void log_fields_add(struct log_fields *f, const char *key, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        struct log_field *e = GROW(f->v, f->n);
        e->key = key;
        e->value = xvasprintf(fmt, ap);
        va_end(ap);
}

void log_fields_done(struct log_fields *f) {
        for (size_t i = 0; i < f->n; i++)
                free(f->v[i].value);
        free(f->v);
        f->v = NULL;
        f->n = 0;
}

void log_event(int prio, const char *message_id, const struct log_fields *f, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *msg = xvasprintf(fmt, ap);
        va_end(ap);
        emit(prio, message_id, f, msg);
}
