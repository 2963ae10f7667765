/* Tests for the lib/core/xmlutil helpers that find children by name, read
 * an element's text as it is and edit a document indented as it is
 * (xml_next_child(), xml_content(), xml_child_or_new(),
 * xml_insert_*_indented(), xml_add_copy_indented()): each under the one
 * namespace rule, so a namespaced decoy element of the same local name is
 * never matched, and each edit checked by the bytes it serialises to. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <libxml/parser.h>
#include <string.h>

#include "util.h"
#include "xmlutil.h"

static xmlDocPtr parse(const char *xml) {
        xmlDocPtr doc = xmlReadMemory(xml, (int) strlen(xml), "t.xml", NULL, XML_PARSE_NONET);
        assert_non_null(doc);
        return doc;
}

/* The root element serialised (no XML declaration). */
static char *dump_root(xmlDocPtr doc) {
        xmlBufferPtr buf = xmlBufferCreate();
        assert_non_null(buf);
        xmlNodeDump(buf, doc, xmlDocGetRootElement(doc), 0, 0);
        char *r = xstrdup((const char *) xmlBufferContent(buf));
        xmlBufferFree(buf);
        return r;
}

/* xml_child() + xml_next_child() visit every <os> in no namespace, in
 * order, and skip <x:os> and the other elements between them. */
static void test_next_child_skips_decoys(void **state) {
        (void) state;
        _cleanup_xmldoc_ xmlDocPtr doc = parse("<domain xmlns:x='urn:x'><x:os id='decoy0'/><os id='a'/><name/>"
                                               "<x:os id='decoy1'/>text<os id='b'/><os xmlns='urn:y' id='decoy2'/></domain>");
        xmlNodePtr root = xmlDocGetRootElement(doc);
        const char *want[] = { "a", "b" };
        size_t n = 0;
        for (xmlNodePtr c = xml_child(root, "os"); c; c = xml_next_child(c, "os")) {
                assert_true(n < ELEMENTSOF(want));
                assert_true(xml_prop_is(c, "id", want[n]));
                n++;
        }
        assert_int_equal(n, 2);
        assert_null(xml_next_child(NULL, "os"));
}

/* xml_content() keeps the white space xml_text() trims, and joins the
 * text of child elements as an XPath string value does. */
static void test_content_as_is(void **state) {
        (void) state;
        _cleanup_xmldoc_ xmlDocPtr doc = parse("<domain><kernel> /boot/vmlinuz\n</kernel><a>x<b>y</b>z</a><e/></domain>");
        xmlNodePtr root = xmlDocGetRootElement(doc);
        _cleanup_free_ char *raw = xml_content(xml_child(root, "kernel"));
        _cleanup_free_ char *trimmed = xml_text(xml_child(root, "kernel"));
        _cleanup_free_ char *joined = xml_content(xml_child(root, "a"));
        _cleanup_free_ char *empty = xml_content(xml_child(root, "e"));
        assert_string_equal(raw, " /boot/vmlinuz\n");
        assert_string_equal(trimmed, "/boot/vmlinuz");
        assert_string_equal(joined, "xyz");
        assert_string_equal(empty, "");
        assert_null(xml_content(NULL));
}

/* xml_child_or_new() returns the <metadata> in no namespace, and makes a
 * new one first, before the white space, when only a decoy is there. */
static void test_child_or_new(void **state) {
        (void) state;
        _cleanup_xmldoc_ xmlDocPtr has = parse("<domain>\n  <name>v</name>\n  <metadata id='real'/>\n</domain>");
        xmlNodePtr md = xml_child_or_new(xmlDocGetRootElement(has), "metadata");
        assert_true(xml_prop_is(md, "id", "real"));
        _cleanup_free_ char *same = dump_root(has);
        assert_string_equal(same, "<domain>\n  <name>v</name>\n  <metadata id=\"real\"/>\n</domain>");

        _cleanup_xmldoc_ xmlDocPtr decoy = parse("<domain>\n  <x:metadata xmlns:x='urn:x'/>\n</domain>");
        md = xml_child_or_new(xmlDocGetRootElement(decoy), "metadata");
        assert_true(xml_is(md, "metadata"));
        assert_null(md->ns);
        _cleanup_free_ char *made = dump_root(decoy);
        assert_string_equal(made, "<domain><metadata/>\n  <x:metadata xmlns:x=\"urn:x\"/>\n</domain>");

        _cleanup_xmldoc_ xmlDocPtr empty = parse("<domain/>");
        md = xml_child_or_new(xmlDocGetRootElement(empty), "metadata");
        _cleanup_free_ char *first = dump_root(empty);
        assert_string_equal(first, "<domain><metadata/></domain>");
}

/* xml_insert_after_indented() and xml_insert_before_indented() copy the
 * white space in front of ref; without any, e goes right beside ref. */
static void test_insert_indented(void **state) {
        (void) state;
        _cleanup_xmldoc_ xmlDocPtr doc = parse("<d>\n    <a/>\n    <b/>\n</d>");
        xmlNodePtr root = xmlDocGetRootElement(doc);
        xml_insert_after_indented(xml_child(root, "a"), xmlNewDocNode(doc, NULL, (const xmlChar *) "after", NULL));
        xml_insert_before_indented(xml_child(root, "b"), xmlNewDocNode(doc, NULL, (const xmlChar *) "before", NULL));
        _cleanup_free_ char *s = dump_root(doc);
        assert_string_equal(s, "<d>\n    <a/>\n    <after/>\n    <before/>\n    <b/>\n</d>");

        _cleanup_xmldoc_ xmlDocPtr flat = parse("<d><a/><b/></d>");
        root = xmlDocGetRootElement(flat);
        xml_insert_after_indented(xml_child(root, "a"), xmlNewDocNode(flat, NULL, (const xmlChar *) "after", NULL));
        xml_insert_before_indented(xml_child(root, "a"), xmlNewDocNode(flat, NULL, (const xmlChar *) "before", NULL));
        _cleanup_free_ char *f = dump_root(flat);
        assert_string_equal(f, "<d><before/><a/><after/><b/></d>");
}

/* xml_add_copy_indented() puts a copy of an element of another document
 * after the last element (a namespaced one counts: it is an element), with
 * its indentation; with none, or none indented, last. */
static void test_add_copy_indented(void **state) {
        (void) state;
        _cleanup_xmldoc_ xmlDocPtr src = parse("<m:mark xmlns:m='urn:m'><m:x/></m:mark>");
        xmlNodePtr mark = xmlDocGetRootElement(src);

        _cleanup_xmldoc_ xmlDocPtr doc = parse("<md>\n    <k:own xmlns:k='urn:k'/>\n  </md>");
        xmlNodePtr copy = xml_add_copy_indented(xmlDocGetRootElement(doc), mark);
        assert_ptr_not_equal(copy, mark);
        assert_ptr_equal(copy->doc, doc);
        assert_true(xml_is_ns(copy, "urn:m", "mark"));
        _cleanup_free_ char *s = dump_root(doc);
        assert_string_equal(s, "<md>\n    <k:own xmlns:k=\"urn:k\"/>\n    <m:mark xmlns:m=\"urn:m\"><m:x/></m:mark>\n  </md>");

        _cleanup_xmldoc_ xmlDocPtr flat = parse("<md><own/>\n</md>");
        xml_add_copy_indented(xmlDocGetRootElement(flat), mark);
        _cleanup_free_ char *f = dump_root(flat);
        assert_string_equal(f, "<md><own/>\n<m:mark xmlns:m=\"urn:m\"><m:x/></m:mark></md>");

        _cleanup_xmldoc_ xmlDocPtr empty = parse("<md/>");
        xml_add_copy_indented(xmlDocGetRootElement(empty), mark);
        _cleanup_free_ char *e = dump_root(empty);
        assert_string_equal(e, "<md><m:mark xmlns:m=\"urn:m\"><m:x/></m:mark></md>");
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_next_child_skips_decoys),
                cmocka_unit_test(test_content_as_is),
                cmocka_unit_test(test_child_or_new),
                cmocka_unit_test(test_insert_indented),
                cmocka_unit_test(test_add_copy_indented),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
