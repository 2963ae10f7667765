/* One reading of XML for all of pcinuma (docs/security.md, "One reading
 * of XML"): the element and
 * attribute helpers that the domain parser, the rewriter, the mark's
 * writer and parser and the migration rewrite all use (the NCCL and
 * clique code read the domain through the parser's model), so that no two
 * of them can read different elements of one document.
 *
 * The namespace rule, the one rule every reader follows:
 *   - libvirt's own elements and attributes are in no namespace.
 *     xml_is(), xml_child(), xml_prop*() and xml_set_prop*() match and
 *     write only those: <x:source xmlns:x='urn:x'> is not a <source>, and
 *     x:bus='...' is not a bus attribute.  (libvirt reads its schema the
 *     same way.)
 *   - Another vocabulary's elements (pcinuma's mark, <qemu:...>) are
 *     matched by namespace URI, never by prefix: xml_is_ns(),
 *     xml_child_ns().
 * Nothing here matches an element by its local name alone.
 *
 * Pure: no I/O, no globals. */
#pragma once

#include <libxml/tree.h>
#include <stdbool.h>

#include "mark-urn.h"
#include "pciaddr.h"
#include "util.h"

/* --- elements ---------------------------------------------------------------- */

/* Is n the element 'name' in no namespace? */
bool xml_is(xmlNodePtr n, const char *name);

/* Is n an element in namespace 'href' (by URI, whatever its prefix), named
 * 'name' (NULL: any name)? */
bool xml_is_ns(xmlNodePtr n, const char *href, const char *name);

/* The first child element of parent that xml_is(c, name), or NULL (also
 * for a NULL parent). */
xmlNodePtr xml_child(xmlNodePtr parent, const char *name);

/* The first child element of parent that xml_is_ns(c, href, name). */
xmlNodePtr xml_child_ns(xmlNodePtr parent, const char *href, const char *name);

/* The next sibling of n that xml_is(c, name), or NULL: with xml_child(),
 * a loop over every child element 'name' in no namespace,
 *     for (c = xml_child(p, name); c; c = xml_next_child(c, name))  */
xmlNodePtr xml_next_child(xmlNodePtr n, const char *name);

/* The next sibling element of n (any name, any namespace), or NULL. */
xmlNodePtr xml_next_element(xmlNodePtr n);

/* The first and the last child element of parent (any name), or NULL. */
xmlNodePtr xml_first_element(xmlNodePtr parent);
xmlNodePtr xml_last_element(xmlNodePtr parent);

/* A text node of white space only? */
bool xml_is_ws_text(xmlNodePtr n);

/* The text of element n, white space trimmed at both ends; malloc'ed, or
 * NULL for a NULL n. */
char *xml_text(xmlNodePtr n);

/* The text of element n as it is (all its text, nothing trimmed), as an
 * XPath string value reads it; malloc'ed, or NULL for a NULL n. */
char *xml_content(xmlNodePtr n);

/* --- editing, indented as the document is ----------------------------------- */

/* The first child element of parent that xml_is(c, name); if there is
 * none, a new empty element 'name' in no namespace, made parent's first
 * child node (before any text). */
xmlNodePtr xml_child_or_new(xmlNodePtr parent, const char *name);

/* Insert element e as the next sibling of ref, or as the previous one,
 * with a copy of the white space in front of ref (if any) in front of e:
 * e is indented as ref, and removing e with the white space in front of
 * it gives back the document as it was. */
void xml_insert_after_indented(xmlNodePtr ref, xmlNodePtr e);
void xml_insert_before_indented(xmlNodePtr ref, xmlNodePtr e);

/* Put a deep copy of element e (of any document) into parent: after
 * parent's last child element, indented as it (xml_insert_after_indented())
 * when white space is in front of that element; else as parent's last
 * child node.  Returns the copy. */
xmlNodePtr xml_add_copy_indented(xmlNodePtr parent, xmlNodePtr e);

/* --- attributes (in no namespace) ------------------------------------------- */

/* The value of attribute 'name' without a copy where it can: in place when
 * it is one text node (libxml2 always keeps it so without a DTD), else a
 * copy in *buf for the caller to free().  NULL when absent. */
const char *xml_prop_ref(xmlNodePtr n, const char *name, char **buf);

/* The same, malloc'ed (free()), or NULL. */
char *xml_prop(xmlNodePtr n, const char *name);

/* Is attribute 'name' there and equal to 'value'? */
bool xml_prop_is(xmlNodePtr n, const char *name, const char *value);

/* Is attribute 'name' there? */
bool xml_has_prop(xmlNodePtr n, const char *name);

/* Set attribute 'name' to value (an existing one keeps its place, a new
 * one goes last); value NULL: nothing is done. */
void xml_set_prop(xmlNodePtr n, const char *name, const char *value);

/* Set it to a decimal number. */
void xml_set_prop_int(xmlNodePtr n, const char *name, int value);

/* Set it to "0x" and 'width' hex digits ("0x003b"). */
void xml_set_prop_hex(xmlNodePtr n, const char *name, int width, unsigned value);

/* Remove attribute 'name', if it is there. */
void xml_unset_prop(xmlNodePtr n, const char *name);

/* --- PCI addresses ------------------------------------------------------------ */

/* A PCI <address>'s domain, bus, slot and function, parsed as libvirt does
 * (base 0, so "0x13" and "19" both work); an absent one is 0.  0, or
 * -EINVAL for a value out of range. */
int xml_parse_pci_address(xmlNodePtr addr, struct pci_addr *ret);

/* Write a's domain, bus, slot and function into <address> addr as libvirt
 * writes them ("0x0000", "0x3b", "0x00", "0x0"), leaving its other
 * attributes (type, multifunction) alone. */
void xml_set_pci_address(xmlNodePtr addr, const struct pci_addr *a);

/* --- the pcinuma mark ---------------------------------------------------------- */

/* Is n a <pcinuma:topology> element, the mark (mark.h), by namespace URI? */
bool xml_is_mark(xmlNodePtr n);

/* The mark of the domain whose root element is 'root', in its first
 * <metadata>, into *ret (NULL when there is none).  A mark in a second
 * <metadata>, or two marks, give -EINVAL with *ret_error. */
int xml_locate_mark(xmlNodePtr root, xmlNodePtr *ret, char **ret_error);

DEFINE_TRIVIAL_CLEANUP_FUNC(xmlDocPtr, xmlFreeDoc)
#define _cleanup_xmldoc_ _cleanup_(xmlFreeDocp)
