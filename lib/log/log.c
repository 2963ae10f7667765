/* Logging to the journal or stderr.  The process-wide target is the one
 * piece of global state the daemon keeps: it is set once at start. */
#include "log.h"

#include <sys/uio.h>
#include <systemd/sd-journal.h>

static enum log_target target = LOG_TARGET_STDERR;
static const char *ident = "pcinumad";

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
        if (prio > LOG_DEBUG)
                return;         /* not a syslog priority */
        if (target == LOG_TARGET_JOURNAL) {
                /* Every "KEY=value" in one buffer, the iovecs pointing
                 * into it: one allocation instead of one per field. */
                size_t n = 3 + (message_id ? 1 : 0) + (f ? f->n : 0);
                _cleanup_free_ struct iovec *iov = xcalloc(n, sizeof(*iov));
                _cleanup_free_ size_t *end = xcalloc(n, sizeof(size_t));
                struct strbuf b = {0};
                size_t k = 0;
                char prio_s[16];
                snprintf(prio_s, sizeof prio_s, "%d", prio);
#define FIELD(key, value) do { strbuf_append(&b, key); strbuf_append(&b, value); end[k++] = b.len; } while (0)
                FIELD("MESSAGE=", msg);
                FIELD("PRIORITY=", prio_s);
                FIELD("SYSLOG_IDENTIFIER=", ident);
                if (message_id)
                        FIELD("MESSAGE_ID=", message_id);
                for (size_t i = 0; f && i < f->n; i++) {
                        strbuf_append(&b, f->v[i].key);
                        FIELD("=", f->v[i].value);
                }
#undef FIELD
                for (size_t i = 0, start = 0; i < k; start = end[i], i++)
                        iov[i] = (struct iovec) { .iov_base = b.buf + start, .iov_len = end[i] - start };
                int r = sd_journal_sendv(iov, (int) k);
                strbuf_done(&b);
                if (r >= 0)
                        return;
                /* No journal: fall through to stderr rather than lose it. */
        }

        struct strbuf b = {0};
        strbuf_append(&b, ident);
        strbuf_append(&b, ": ");
        strbuf_append(&b, prio_prefix(prio));
        strbuf_append(&b, msg);
        if (message_id || (f && f->n)) {
                strbuf_append(&b, " |");
                if (message_id) {
                        strbuf_append(&b, " MESSAGE_ID=");
                        strbuf_append(&b, message_id);
                }
                for (size_t i = 0; f && i < f->n; i++) {
                        const char *v = f->v[i].value;
                        bool quote = !*v || strpbrk(v, " \t\n\"\\") != NULL;
                        strbuf_append(&b, " ");
                        strbuf_append(&b, f->v[i].key);
                        strbuf_append(&b, "=");
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

/* A field's value: "%s" and "%d", nearly all of them (one per device and
 * request), without vasprintf(). */
_printf_(1, 0) static char *field_value(const char *fmt, va_list ap) {
        if (fmt[0] == '%' && fmt[1] == 's' && fmt[2] == '\0')
                return xstrdup(va_arg(ap, const char *));
        if (fmt[0] == '%' && fmt[1] == 'd' && fmt[2] == '\0') {
                char buf[16], *p = buf + sizeof buf;
                int v = va_arg(ap, int);
                unsigned u = v < 0 ? 0u - (unsigned) v : (unsigned) v;
                *--p = '\0';
                do
                        *--p = (char) ('0' + u % 10);
                while ((u /= 10) > 0);
                if (v < 0)
                        *--p = '-';
                return xstrdup(p);
        }
        return xvasprintf(fmt, ap);
}

void log_fields_add(struct log_fields *f, const char *key, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        struct log_field *e = GROW(f->v, f->n);
        e->key = key;
        e->value = field_value(fmt, ap);
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
