/* The element and attribute helpers every XML reader and writer of
 * pcinuma uses, with one namespace rule (xmlutil.h).  Pure. */
#include "xmlutil.h"

#include <errno.h>
#include <string.h>

bool xml_is(xmlNodePtr n, const char *name) {
        return n && n->type == XML_ELEMENT_NODE && !n->ns && xmlStrEqual(n->name, (const xmlChar *) name);
}

bool xml_is_ns(xmlNodePtr n, const char *href, const char *name) {
        return n && n->type == XML_ELEMENT_NODE && n->ns && n->ns->href &&
               xmlStrEqual(n->ns->href, (const xmlChar *) href) && (!name || xmlStrEqual(n->name, (const xmlChar *) name));
}

xmlNodePtr xml_child(xmlNodePtr parent, const char *name) {
        for (xmlNodePtr c = parent ? parent->children : NULL; c; c = c->next)
                if (xml_is(c, name))
                        return c;
        return NULL;
}

xmlNodePtr xml_child_ns(xmlNodePtr parent, const char *href, const char *name) {
        for (xmlNodePtr c = parent ? parent->children : NULL; c; c = c->next)
                if (xml_is_ns(c, href, name))
                        return c;
        return NULL;
}

xmlNodePtr xml_next_child(xmlNodePtr n, const char *name) {
        for (n = n ? n->next : NULL; n; n = n->next)
                if (xml_is(n, name))
                        return n;
        return NULL;
}

xmlNodePtr xml_next_element(xmlNodePtr n) {
        for (n = n ? n->next : NULL; n && n->type != XML_ELEMENT_NODE; n = n->next)
                ;
        return n;
}

xmlNodePtr xml_first_element(xmlNodePtr parent) {
        xmlNodePtr c = parent ? parent->children : NULL;
        return c && c->type != XML_ELEMENT_NODE ? xml_next_element(c) : c;
}

xmlNodePtr xml_last_element(xmlNodePtr parent) {
        xmlNodePtr last = NULL;
        for (xmlNodePtr c = parent ? parent->children : NULL; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE)
                        last = c;
        return last;
}

bool xml_is_ws_text(xmlNodePtr n) {
        if (!n || n->type != XML_TEXT_NODE || !n->content)
                return false;
        for (const xmlChar *c = n->content; *c; c++)
                if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r')
                        return false;
        return true;
}

char *xml_text(xmlNodePtr n) {
        if (!n)
                return NULL;
        /* One text node, the usual case, is read in place. */
        xmlChar *v = NULL;
        const char *s;
        if (n->type == XML_ELEMENT_NODE && n->children && !n->children->next && n->children->type == XML_TEXT_NODE &&
            n->children->content)
                s = (const char *) n->children->content;
        else {
                v = xmlNodeGetContent(n);
                if (!v)
                        return NULL;
                s = (const char *) v;
        }
        while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
                s++;
        size_t l = strlen(s);
        while (l > 0 && (s[l - 1] == ' ' || s[l - 1] == '\n' || s[l - 1] == '\t' || s[l - 1] == '\r'))
                l--;
        char *r = xstrndup(s, l);
        xmlFree(v);
        return r;
}

char *xml_content(xmlNodePtr n) {
        if (!n)
                return NULL;
        xmlChar *v = xmlNodeGetContent(n);
        if (!v)
                return NULL;
        char *r = xstrdup((const char *) v);
        xmlFree(v);
        return r;
}

xmlNodePtr xml_child_or_new(xmlNodePtr parent, const char *name) {
        xmlNodePtr c = xml_child(parent, name);
        if (c)
                return c;
        c = xmlNewDocNode(parent->doc, NULL, (const xmlChar *) name, NULL);
        if (!c)
                abort();
        if (parent->children)
                xmlAddPrevSibling(parent->children, c);
        else
                xmlAddChild(parent, c);
        return c;
}

void xml_insert_after_indented(xmlNodePtr ref, xmlNodePtr e) {
        xmlNodePtr ws = xml_is_ws_text(ref->prev) ? ref->prev : NULL;
        xmlAddNextSibling(ref, e);
        if (ws)
                xmlAddPrevSibling(e, xmlNewText(ws->content));
}

void xml_insert_before_indented(xmlNodePtr ref, xmlNodePtr e) {
        xmlNodePtr ws = xml_is_ws_text(ref->prev) ? ref->prev : NULL;
        xmlAddPrevSibling(ws ? ws : ref, e);
        if (ws)
                xmlAddPrevSibling(e, xmlNewText(ws->content));
}

xmlNodePtr xml_add_copy_indented(xmlNodePtr parent, xmlNodePtr e) {
        xmlNodePtr copy = xmlDocCopyNode(e, parent->doc, 1);
        if (!copy)
                abort();
        xmlNodePtr last = xml_last_element(parent);
        if (last && xml_is_ws_text(last->prev))
                xml_insert_after_indented(last, copy);
        else
                xmlAddChild(parent, copy);
        return copy;
}

/* The attribute 'name' in no namespace, or NULL. */
static xmlAttrPtr no_ns_attr(xmlNodePtr n, const char *name) {
        if (!n || n->type != XML_ELEMENT_NODE)
                return NULL;
        for (xmlAttrPtr a = n->properties; a; a = a->next)
                if (!a->ns && xmlStrEqual(a->name, (const xmlChar *) name))
                        return a;
        return NULL;
}

const char *xml_prop_ref(xmlNodePtr n, const char *name, char **buf) {
        *buf = NULL;
        if (!n || n->type != XML_ELEMENT_NODE)
                return NULL;
        if (n->doc && n->doc->intSubset) {
                /* DTD default attributes: libxml2's own lookup. */
                xmlChar *v = xmlGetNoNsProp(n, (const xmlChar *) name);
                if (!v)
                        return NULL;
                *buf = xstrdup((const char *) v);
                xmlFree(v);
                return *buf;
        }
        xmlAttrPtr a = no_ns_attr(n, name);
        if (!a)
                return NULL;
        /* As xmlGetNoNsProp() reads the value. */
        xmlNodePtr t = a->children;
        if (!t)
                return "";
        if (!t->next && (t->type == XML_TEXT_NODE || t->type == XML_CDATA_SECTION_NODE))
                return (const char *) t->content;
        xmlChar *v = xmlNodeListGetString(a->doc, t, 1);
        *buf = xstrdup(v ? (const char *) v : "");
        xmlFree(v);
        return *buf;
}

char *xml_prop(xmlNodePtr n, const char *name) {
        char *buf;
        const char *v = xml_prop_ref(n, name, &buf);
        return buf ? buf : v ? xstrdup(v) : NULL;
}

bool xml_prop_is(xmlNodePtr n, const char *name, const char *value) {
        _cleanup_free_ char *buf = NULL;
        const char *v = xml_prop_ref(n, name, &buf);
        return v && streq(v, value);
}

bool xml_has_prop(xmlNodePtr n, const char *name) {
        _cleanup_free_ char *buf = NULL;
        return xml_prop_ref(n, name, &buf) != NULL;
}

void xml_set_prop(xmlNodePtr n, const char *name, const char *value) {
        /* xmlSetNsProp() with no namespace replaces only the attribute
         * in no namespace, and never reads a prefix out of the name. */
        if (value && !xmlSetNsProp(n, NULL, (const xmlChar *) name, (const xmlChar *) value))
                abort();
}

void xml_set_prop_int(xmlNodePtr n, const char *name, int value) {
        char v[16];
        snprintf(v, sizeof v, "%d", value);
        xml_set_prop(n, name, v);
}

void xml_set_prop_hex(xmlNodePtr n, const char *name, int width, unsigned value) {
        char v[16];
        snprintf(v, sizeof v, "0x%0*x", width, value);
        xml_set_prop(n, name, v);
}

void xml_unset_prop(xmlNodePtr n, const char *name) {
        xmlAttrPtr a = no_ns_attr(n, name);
        if (a)
                xmlRemoveProp(a);
}

/* An attribute's value in place: "" for a value libxml2 did not keep as
 * one text node (it always does without entities, which the domain
 * parser refuses). */
static const char *attr_value(xmlAttrPtr a) {
        return a->children && a->children->type == XML_TEXT_NODE && !a->children->next && a->children->content
                       ? (const char *) a->children->content
                       : "";
}

int xml_parse_pci_address(xmlNodePtr addr, struct pci_addr *ret) {
        static const char *const names[4] = { "domain", "bus", "slot", "function" };
        static const uint64_t max[4] = { UINT32_MAX, 0xff, 0x1f, 7 };
        const char *v[4] = { NULL, NULL, NULL, NULL };
        uint64_t n[4] = { 0, 0, 0, 0 };

        /* One pass over the attributes. */
        for (xmlAttrPtr a = addr ? addr->properties : NULL; a; a = a->next) {
                if (a->ns)
                        continue;
                for (size_t k = 0; k < 4; k++)
                        if (!v[k] && xmlStrEqual(a->name, (const xmlChar *) names[k])) {
                                v[k] = attr_value(a);
                                break;
                        }
        }
        for (size_t k = 0; k < 4; k++)
                if (v[k] && parse_uint(v[k], 0, max[k], &n[k]) < 0)
                        return -EINVAL;
        *ret = (struct pci_addr) { .domain = (uint32_t) n[0], .bus = (uint8_t) n[1], .slot = (uint8_t) n[2], .func = (uint8_t) n[3] };
        return 0;
}

void xml_set_pci_address(xmlNodePtr addr, const struct pci_addr *a) {
        xml_set_prop_hex(addr, "domain", 4, a->domain);
        xml_set_prop_hex(addr, "bus", 2, a->bus);
        xml_set_prop_hex(addr, "slot", 2, a->slot);
        xml_set_prop_hex(addr, "function", 1, a->func);
}

/* --- the pcinuma mark ---------------------------------------------------------- */

bool xml_is_mark(xmlNodePtr n) {
        return xml_is_ns(n, PCINUMA_TOPOLOGY_NS, "topology");
}

int xml_locate_mark(xmlNodePtr root, xmlNodePtr *ret, char **ret_error) {
        xmlNodePtr md = xml_child(root, "metadata"), mark = NULL;
        /* libvirt keeps one <metadata>; a mark in a second one would come
         * to light only once a revert removed the first. */
        for (xmlNodePtr m = md ? md->next : NULL; m; m = m->next)
                for (xmlNodePtr c = xml_is(m, "metadata") ? m->children : NULL; c; c = c->next)
                        if (xml_is_ns(c, PCINUMA_TOPOLOGY_NS, NULL))
                                return set_error(ret_error, -EINVAL, "line %ld: a pcinuma mark in a second <metadata> element (the first is at line %ld)",
                                                 xmlGetLineNo(c), xmlGetLineNo(md));
        for (xmlNodePtr c = md ? md->children : NULL; c; c = c->next) {
                if (!xml_is_mark(c))
                        continue;
                /* pcinuma writes one; which of two would a revert undo? */
                if (mark)
                        return set_error(ret_error, -EINVAL, "line %ld: a second pcinuma mark <pcinuma:topology> (the first is at line %ld)",
                                         xmlGetLineNo(c), xmlGetLineNo(mark));
                mark = c;
        }
        *ret = mark;
        return 0;
}
