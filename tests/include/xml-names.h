/* What the revert checks (tests/fuzz/fuzz-revert.c) and the revert
 * property test (tests/unit/test-revert-property.c) share: a document's
 * first element or attribute name that uses an undeclared prefix. */
#pragma once

#include <stddef.h>
#include <string.h>

#include <libxml/tree.h>

/* Every element and attribute name is either unprefixed or bound to a
 * declared namespace: libxml2 keeps an undeclared "qemu:x" as a plain name
 * with the colon in it.  Returns the first offending name, or NULL. */
static inline const char *undeclared_name(xmlNodePtr n) {
        for (; n; n = n->next) {
                if (n->type != XML_ELEMENT_NODE)
                        continue;
                if (strchr((const char *) n->name, ':') || (n->ns && !n->ns->href))
                        return (const char *) n->name;
                for (xmlAttrPtr a = n->properties; a; a = a->next)
                        if (strchr((const char *) a->name, ':'))
                                return (const char *) a->name;
                const char *c = undeclared_name(n->children);
                if (c)
                        return c;
        }
        return NULL;
}
