/* Property test for revert (issue 13): plan -> user edits -> revert -> plan
 * always gives well-formed XML with every namespace prefix declared, keeps
 * every edit the user made, and, when nothing was edited, revert(plan(x))
 * is x canonically (C14N).
 *
 * The domains: a few thousand generated from a fixed seed (q35, 1-4 cells,
 * passthrough devices of a four-node fake host, pruned root ports, quotes
 * in attributes), and, with --golden, every golden case's input with its
 * fixture host and policy.  The edits after planning, one to three: the
 * user's <qemu:commandline> arguments, <qemu:capabilities>,
 * <qemu:override>; a NIC on one of pcinuma's root ports; a user root port
 * with a disk on pcinuma's expander bus; another application's metadata
 * and a <description> with quotes and markup characters; and edits of the
 * mark itself (attributes changed or removed, elements removed), after
 * which the revert may refuse the mark, but only with a message.
 *
 * With --out DIR, a sample of the documents (every edited, reverted and
 * replanned one of the golden cases but those marked libvirt-skip, every
 * --every'th of the generated ones) is written there; tests/libvirt/test_revert_property.py checks
 * them against libvirt's schema.  The program prints its counts. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <libxml/c14n.h>
#include <libxml/parser.h>
#include <libxml/xmlsave.h>
#include <stdio.h>

#include "read-text.h"
#include "domain.h"
#include "engine.h"
#include "hostmap.h"
#include "hostmap-sysfs.h"
#include "policy.h"
#include "util.h"

#include "fake-host.h"
#include "xml-names.h"

#define QEMU_URI "http://libvirt.org/schemas/domain/qemu/1.0"
#define N_GENERATED 3000

static const char *golden_dir, *hosts_dir, *out_dir;
static unsigned every = 10;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) {
        /* xorshift64*: deterministic, the same sequence on every machine */
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        return rng * 0x2545f4914f6cdd1dull;
}

static unsigned pick(unsigned n) {
        return (unsigned) (rnd() % n);
}

static bool chance(unsigned pct) {
        return pick(100) < pct;
}

enum edit {
        EDIT_QEMU_ARG,
        EDIT_QEMU_CAPS,
        EDIT_QEMU_OVERRIDE,
        EDIT_NIC_ON_PORT,
        EDIT_PORT_ON_PXB,
        EDIT_OTHER_METADATA,
        EDIT_DESCRIPTION,
        EDIT_MARK,
        _EDIT_MAX,
};

static const char *const edit_names[_EDIT_MAX] = {
        "qemu:commandline arg", "qemu:capabilities", "qemu:override", "NIC on pcinuma's root port",
        "root port + disk on pcinuma's expander bus", "other metadata with quotes", "description with quotes",
        "mark attribute or element edited",
};

static struct {
        unsigned domains, planned, not_applied, unedited_equal, edited, reverted, refused, warned, replanned,
                replan_refused, written;
        unsigned edits[_EDIT_MAX];
} count;

/* ---- helpers ------------------------------------------------------------------- */

static char *format_doc(xmlDocPtr doc) {
        xmlBufferPtr buf = xmlBufferCreate();
        xmlSaveCtxtPtr save = xmlSaveToBuffer(buf, "UTF-8", XML_SAVE_NO_DECL);
        xmlSaveDoc(save, doc);
        xmlSaveClose(save);
        char *r = xstrndup((const char *) xmlBufferContent(buf), (size_t) xmlBufferLength(buf));
        xmlBufferFree(buf);
        return r;
}

static xmlDocPtr read_doc(const char *xml) {
        return xmlReadMemory(xml, (int) strlen(xml), "t.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

static char *c14n(const char *xml) {
        _cleanup_xmldoc_ xmlDocPtr doc = read_doc(xml);
        assert_non_null(doc);
        xmlChar *out = NULL;
        assert_true(xmlC14NDocDumpMemory(doc, NULL, XML_C14N_1_0, NULL, 0, &out) >= 0);
        char *r = xstrdup((const char *) out);
        xmlFree(out);
        return r;
}


/* Well-formed, every prefix declared, a domain pcinuma reads; with or
 * without a mark as 'marked' says. */
static void check_output(const char *what, const char *case_name, const char *xml, bool marked) {
        _cleanup_xmldoc_ xmlDocPtr doc = read_doc(xml);
        if (!doc)
                fail_msg("%s: %s is not well-formed:\n%s", case_name, what, xml);
        const char *bad = undeclared_name(xmlDocGetRootElement(doc));
        if (bad)
                fail_msg("%s: %s uses the undeclared prefix of <%s>:\n%s", case_name, what, bad, xml);
        _cleanup_domain_ struct domain *d = NULL;
        _cleanup_free_ char *err = NULL;
        if (domain_parse(xml, strlen(xml), &d, &err) < 0)
                fail_msg("%s: %s does not parse as a domain: %s\n%s", case_name, what, err, xml);
        if (!!d->mark != marked)
                fail_msg("%s: %s %s a mark:\n%s", case_name, what, marked ? "lacks" : "still has", xml);
}

static void write_out(const char *case_name, const char *what, const char *xml) {
        if (!out_dir)
                return;
        _cleanup_free_ char *path = xasprintf("%s/%s-%s.xml", out_dir, case_name, what);
        _cleanup_fclose_ FILE *f = fopen(path, "we");
        if (!f || fputs(xml, f) < 0)
                fail_msg("cannot write %s", path);
        count.written++;
}

static xmlNodePtr child(xmlNodePtr parent, const char *name) {
        return parent ? xml_child(parent, name) : NULL;
}

static xmlNsPtr qemu_ns(xmlNodePtr root) {
        xmlNsPtr ns = xmlSearchNsByHref(root->doc, root, (const xmlChar *) QEMU_URI);
        return ns ? ns : xmlNewNs(root, (const xmlChar *) QEMU_URI, (const xmlChar *) "qemu");
}

static xmlNodePtr qemu_elem(xmlNodePtr root, const char *name) {
        for (xmlNodePtr c = root->children; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE && c->ns && c->ns->href &&
                    xmlStrEqual(c->ns->href, (const xmlChar *) QEMU_URI) && xmlStrEqual(c->name, (const xmlChar *) name))
                        return c;
        return NULL;
}

static const char *const specials[] = { "", "'", "\"", "&", "<x>", " a b", "it's \"q\" & <t> 100%" };

/* The mark's children named 'name' (in document order). */
static size_t mark_children(xmlNodePtr mark, const char *name, xmlNodePtr *out, size_t max) {
        size_t n = 0;
        for (xmlNodePtr c = mark ? mark->children : NULL; c && n < max; c = c->next)
                if (c->type == XML_ELEMENT_NODE && (!name || xmlStrEqual(c->name, (const xmlChar *) name)))
                        out[n++] = c;
        return n;
}

static xmlNodePtr find_mark(xmlNodePtr root) {
        for (xmlNodePtr c = child(root, "metadata") ? child(root, "metadata")->children : NULL; c; c = c->next)
                if (c->type == XML_ELEMENT_NODE && c->ns && xmlStrEqual(c->ns->href, (const xmlChar *) PCINUMA_TOPOLOGY_NS))
                        return c;
        return NULL;
}

static int max_controller_index(xmlNodePtr devices) {
        int m = 0;
        for (xmlNodePtr c = devices->children; c; c = c->next) {
                _cleanup_free_ char *i = xml_is(c, "controller") ? xml_prop(c, "index") : NULL;
                uint64_t v;
                if (i && parse_uint(i, 0, 255, &v) == 0 && (int) v > m)
                        m = (int) v;
        }
        return m;
}

static xmlNodePtr controller(xmlNodePtr devices, int index) {
        for (xmlNodePtr c = devices->children; c; c = c->next) {
                _cleanup_free_ char *i = xml_is(c, "controller") ? xml_prop(c, "index") : NULL;
                uint64_t v;
                if (i && parse_uint(i, 0, 255, &v) == 0 && (int) v == index)
                        return c;
        }
        return NULL;
}

static xmlNodePtr add_parsed(xmlNodePtr parent, const char *fragment) {
        xmlNodePtr list = NULL;
        if (xmlParseInNodeContext(parent, fragment, (int) strlen(fragment), XML_PARSE_NONET, &list) != XML_ERR_OK || !list)
                fail_msg("bad test fragment %s", fragment);
        xmlNodePtr e = list;
        xmlAddChild(parent, e);
        return e;
}

/* Apply one edit of kind k to the planned document.  Returns false when
 * it does not apply (no mark device to replace, ...).  Adds a marker the
 * revert must keep to *markers. */
static bool apply_edit(xmlDocPtr doc, enum edit k, unsigned id, char ***markers, size_t *n_markers) {
        xmlNodePtr root = xmlDocGetRootElement(doc);
        xmlNodePtr devices = child(root, "devices");
        xmlNodePtr mark = find_mark(root);
        xmlNodePtr recs[64];
        char *marker = NULL;

        switch (k) {
        case EDIT_QEMU_ARG: {
                xmlNsPtr ns = qemu_ns(root);
                xmlNodePtr cl = qemu_elem(root, "commandline");
                if (!cl)
                        cl = xmlNewChild(root, ns, (const xmlChar *) "commandline", NULL);
                marker = xasprintf("-user-edit-%u", id);
                _cleanup_free_ char *v = xasprintf("%s%s", marker, specials[pick(7)]);
                xmlNodePtr a = xmlNewDocNode(doc, cl->ns, (const xmlChar *) "arg", NULL);
                xmlSetProp(a, (const xmlChar *) "value", (const xmlChar *) v);
                if (cl->children && chance(50))
                        xmlAddPrevSibling(cl->children, a);
                else
                        xmlAddChild(cl, a);
                break;
        }
        case EDIT_QEMU_CAPS: {
                xmlNsPtr ns = qemu_ns(root);
                xmlNodePtr caps = qemu_elem(root, "capabilities");
                if (!caps)
                        caps = xmlNewChild(root, ns, (const xmlChar *) "capabilities", NULL);
                marker = xasprintf("user-edit-%u", id);
                xmlNodePtr a = xmlNewChild(caps, caps->ns, (const xmlChar *) (chance(50) ? "add" : "del"), NULL);
                xmlSetProp(a, (const xmlChar *) "capability", (const xmlChar *) marker);
                break;
        }
        case EDIT_QEMU_OVERRIDE: {
                xmlNsPtr ns = qemu_ns(root);
                xmlNodePtr ov = qemu_elem(root, "override");
                if (!ov)
                        ov = xmlNewChild(root, ns, (const xmlChar *) "override", NULL);
                marker = xasprintf("ua-user-edit-%u", id);
                xmlNodePtr dev = xmlNewChild(ov, ov->ns, (const xmlChar *) "device", NULL);
                xmlSetProp(dev, (const xmlChar *) "alias", (const xmlChar *) marker);
                xmlNodePtr fe = xmlNewChild(dev, ov->ns, (const xmlChar *) "frontend", NULL);
                xmlNodePtr prop = xmlNewChild(fe, ov->ns, (const xmlChar *) "property", NULL);
                xmlSetProp(prop, (const xmlChar *) "name", (const xmlChar *) "x-note");
                xmlSetProp(prop, (const xmlChar *) "type", (const xmlChar *) "string");
                xmlSetProp(prop, (const xmlChar *) "value", (const xmlChar *) specials[pick(7)]);
                break;
        }
        case EDIT_NIC_ON_PORT: {
                /* The user removes a passthrough device and libvirt puts a
                 * new NIC on the root port it leaves empty. */
                size_t n = mark_children(mark, "device", recs, 64);
                if (!n || !devices)
                        return false;
                xmlNodePtr rec = recs[pick((unsigned) n)];
                _cleanup_free_ char *host = xml_prop(rec, "host");
                _cleanup_free_ char *ctl = xml_prop(rec, "controller");
                uint64_t port;
                struct pci_addr ha;
                if (!host || !ctl || parse_uint(ctl, 10, 255, &port) < 0 || pci_addr_parse(host, &ha) < 0 || !controller(devices, (int) port))
                        return false;
                xmlNodePtr victim = NULL;
                for (xmlNodePtr c = devices->children; c && !victim; c = c->next) {
                        struct pci_addr a;
                        xmlNodePtr sa = child(child(c, "source"), "address");
                        if ((xml_is(c, "hostdev") || xml_is(c, "interface")) && sa && xml_parse_pci_address(sa, &a) == 0 && pci_addr_eq(&a, &ha))
                                victim = c;
                }
                if (!victim)
                        return false;
                xmlUnlinkNode(victim);
                xmlFreeNode(victim);
                marker = xasprintf("52:54:00:%02x:%02x:%02x", (id >> 16) & 0xff, (id >> 8) & 0xff, id & 0xff);
                _cleanup_free_ char *s = xasprintf("<interface type=\"network\"><mac address=\"%s\"/><source network=\"default\"/>"
                                                   "<model type=\"virtio\"/>"
                                                   "<address type=\"pci\" domain=\"0x0000\" bus=\"0x%02x\" slot=\"0x00\" function=\"0x0\"/></interface>",
                                                   marker, (unsigned) port);
                add_parsed(devices, s);
                break;
        }
        case EDIT_PORT_ON_PXB: {
                size_t n = mark_children(mark, "expander", recs, 64);
                if (!n || !devices)
                        return false;
                _cleanup_free_ char *ctl = xml_prop(recs[pick((unsigned) n)], "controller");
                uint64_t pxb;
                if (!ctl || parse_uint(ctl, 10, 255, &pxb) < 0 || !controller(devices, (int) pxb))
                        return false;
                int idx = max_controller_index(devices) + 1;
                if (idx > 255)
                        return false;
                marker = xasprintf("user-edit-%u", id);
                _cleanup_free_ char *port = xasprintf("<controller type=\"pci\" index=\"%d\" model=\"pcie-root-port\">"
                                                      "<address type=\"pci\" domain=\"0x0000\" bus=\"0x%02x\" slot=\"0x1e\" function=\"0x0\"/></controller>",
                                                      idx, (unsigned) pxb);
                add_parsed(devices, port);
                _cleanup_free_ char *disk = xasprintf("<disk type=\"file\" device=\"disk\"><driver name=\"qemu\" type=\"raw\"/>"
                                                      "<source file=\"/var/lib/libvirt/images/%s it&apos;s &amp; &lt;x&gt;.img\"/>"
                                                      "<target dev=\"vdz\" bus=\"virtio\"/>"
                                                      "<address type=\"pci\" domain=\"0x0000\" bus=\"0x%02x\" slot=\"0x00\" function=\"0x0\"/></disk>",
                                                      marker, (unsigned) idx);
                add_parsed(devices, disk);
                break;
        }
        case EDIT_OTHER_METADATA: {
                xmlNodePtr md = child(root, "metadata");
                if (!md)
                        return false;
                marker = xasprintf("user-edit-%u", id);
                _cleanup_free_ char *s = xasprintf("<app:note xmlns:app=\"urn:example:app:%u\" id=\"%s\" v=\"%s\">%s</app:note>",
                                                   id, marker, "it&apos;s &quot;q&quot; &amp; &lt;t&gt;", "a &lt;b&gt; &amp; 'c'");
                add_parsed(md, s);
                break;
        }
        case EDIT_DESCRIPTION: {
                xmlNodePtr desc = child(root, "description");
                if (!desc) {
                        desc = xmlNewDocNode(doc, NULL, (const xmlChar *) "description", NULL);
                        xmlAddNextSibling(child(root, "name"), desc);
                }
                marker = xasprintf("user-edit-%u", id);
                /* added to what is there: an earlier edit's marker stays */
                _cleanup_free_ char *t = xasprintf(" %s %s", marker, specials[pick(7)]);
                xmlNodeAddContent(desc, (const xmlChar *) t);
                break;
        }
        case EDIT_MARK: {
                size_t n = mark_children(mark, NULL, recs, 64);
                if (!mark)
                        return false;
                xmlNodePtr target = n && chance(80) ? recs[pick((unsigned) n)] : mark;
                unsigned how = pick(3);
                if (how == 0 && target != mark) {
                        xmlUnlinkNode(target);
                        xmlFreeNode(target);
                } else {
                        unsigned n_attrs = 0;
                        for (xmlAttrPtr a = target->properties; a; a = a->next)
                                n_attrs++;
                        if (!n_attrs)
                                return false;
                        unsigned which = pick(n_attrs);
                        xmlAttrPtr a = target->properties;
                        while (which--)
                                a = a->next;
                        if (how == 1)
                                xmlRemoveProp(a);
                        else {
                                static const char *const values[] = { "it's", "1", "0", "none", "", "yes", "0x05", "a\"b<c>&d",
                                                                      "type=pci domain=0x0000 bus=0x00 slot=0x1f function=0x0" };
                                _cleanup_free_ char *name = xstrdup((const char *) a->name);
                                xmlSetProp(target, (const xmlChar *) name, (const xmlChar *) values[pick(9)]);
                        }
                }
                return true;   /* no marker: the mark goes anyway */
        }
        case _EDIT_MAX:
                return false;
        }
        *GROW(*markers, *n_markers) = marker;
        return true;
}

/* ---- one domain ------------------------------------------------------------------- */

/* write: 0 none (an input libvirt's schema refuses by design), 1 every
 * --every'th edited domain, 2 all. */
static void run_case(const char *name, const char *xml, const struct hostmap *h, const struct policy *pol,
                     const enum policy_mode *forced, unsigned n_variants, int write_mode) {
        _cleanup_engine_result_ struct engine_result *res = NULL;
        _cleanup_free_ char *err = NULL;
        count.domains++;
        if (engine_plan(xml, strlen(xml), h, pol, forced, &res, &err) < 0)
                fail_msg("%s: planning the input failed: %s", name, err);
        if (res->verdict != PLAN_APPLY || !res->xml || res->already_planned) {
                count.not_applied++;
                return;
        }
        count.planned++;
        const char *planned = res->xml;
        check_output("the plan", name, planned, true);

        /* Nothing edited: revert(plan(x)) is x (for a planned input, its
         * own reverted form), canonically. */
        {
                _cleanup_free_ char *back = NULL, *w = NULL, *e = NULL, *orig = NULL, *ow = NULL, *oe = NULL;
                bool changed = false, ochanged = false;
                if (engine_revert(planned, strlen(planned), &back, &changed, &w, &e) < 0 || !changed)
                        fail_msg("%s: the plan does not revert: %s", name, strna(e));
                assert_int_equal(engine_revert(xml, strlen(xml), &orig, &ochanged, &ow, &oe), 0);
                _cleanup_free_ char *a = c14n(back), *b = c14n(orig);
                if (!streq(a, b))
                        fail_msg("%s: revert(plan(x)) differs from x:\n--- x\n%s\n--- revert(plan(x))\n%s", name, orig, back);
                count.unedited_equal++;
        }

        for (unsigned v = 0; v < n_variants; v++) {
                unsigned id = count.domains * 16 + v;
                _cleanup_xmldoc_ xmlDocPtr doc = read_doc(planned);
                assert_non_null(doc);
                _cleanup_free_ char **markers = NULL;
                size_t n_markers = 0;
                bool mark_edited = false, port_edited = false;
                unsigned n_edits = 1 + pick(3), applied = 0;
                for (unsigned i = 0; i < n_edits; i++) {
                        enum edit k = (enum edit) pick(_EDIT_MAX);
                        /* the mark less often: the rest of the test needs a revert */
                        if (k == EDIT_MARK && chance(50))
                                k = EDIT_QEMU_ARG;
                        if (!apply_edit(doc, k, id * 4 + i, &markers, &n_markers))
                                continue;
                        count.edits[k]++;
                        applied++;
                        mark_edited = mark_edited || k == EDIT_MARK;
                        port_edited = port_edited || k == EDIT_NIC_ON_PORT || k == EDIT_PORT_ON_PXB;
                }
                if (!applied)
                        continue;
                count.edited++;
                _cleanup_free_ char *edited = format_doc(doc);
                _cleanup_free_ char *case_name = xasprintf("%s-%u", name, v);
                bool write = write_mode == 2 || (write_mode == 1 && count.edited % every == 0);
                if (write)
                        write_out(case_name, "1-edited", edited);

                _cleanup_free_ char *back = NULL, *w = NULL, *e = NULL;
                bool changed = false;
                int r = engine_revert(edited, strlen(edited), &back, &changed, &w, &e);
                if (r < 0) {
                        if (!mark_edited)
                                fail_msg("%s: revert refused a mark the user did not touch: %s\n%s", case_name, strna(e), edited);
                        if (!e || !*e)
                                fail_msg("%s: revert refused without a message", case_name);
                        count.refused++;
                        goto next;
                }
                count.reverted++;
                if (w)
                        count.warned++;
                check_output("the reverted domain", case_name, back, false);
                for (size_t i = 0; i < n_markers; i++)
                        if (!strstr(back, markers[i]))
                                fail_msg("%s: the revert lost the user's edit '%s':\n--- edited\n%s\n--- reverted\n%s",
                                         case_name, markers[i], edited, back);
                /* pcinuma's controllers all go, unless a device of the
                 * user's sits on one, which the warning then names */
                if (!w && strstr(back, "pcie-expander-bus") && !strstr(xml, "pcie-expander-bus") && !mark_edited)
                        fail_msg("%s: an expander bus is left without a warning:\n%s", case_name, back);
                if (port_edited && !mark_edited && !w)
                        fail_msg("%s: a device of the user's on pcinuma's ports, and no warning", case_name);
                if (write)
                        write_out(case_name, "2-reverted", back);

                /* plan again */
                {
                        _cleanup_engine_result_ struct engine_result *res2 = NULL;
                        _cleanup_free_ char *e2 = NULL;
                        if (engine_plan(back, strlen(back), h, pol, forced, &res2, &e2) < 0)
                                fail_msg("%s: planning the reverted domain failed: %s\n%s", case_name, e2, back);
                        if (res2->verdict != PLAN_APPLY || !res2->xml) {
                                count.replan_refused++;
                                goto next;
                        }
                        count.replanned++;
                        check_output("the plan of the reverted domain", case_name, res2->xml, res2->verdict == PLAN_APPLY && (res2->changed || res2->already_planned) && strstr(res2->xml, PCINUMA_TOPOLOGY_NS));
                        for (size_t i = 0; i < n_markers; i++)
                                if (!strstr(res2->xml, markers[i]))
                                        fail_msg("%s: the new plan lost the user's edit '%s'", case_name, markers[i]);
                        if (write)
                                write_out(case_name, "3-replanned", res2->xml);
                        _cleanup_free_ char *b2 = NULL, *w2 = NULL, *e3 = NULL;
                        bool c2 = false;
                        if (engine_revert(res2->xml, strlen(res2->xml), &b2, &c2, &w2, &e3) < 0)
                                fail_msg("%s: the new plan does not revert: %s", case_name, e3);
                        check_output("the new plan, reverted", case_name, b2, false);
                }
        next:
                for (size_t i = 0; i < n_markers; i++)
                        free(markers[i]);
        }
}

/* ---- generated domains -------------------------------------------------------------- */

static const struct {
        const char *bdf;
        int node;
        uint32_t class;
} host_devs[] = {
        { "0000:10:00.0", 0, 0x030200 }, { "0000:11:00.0", 0, 0x020000 }, { "0000:12:00.0", 0, 0x010802 },
        { "0000:30:00.0", 1, 0x030200 }, { "0000:31:00.0", 1, 0x020000 }, { "0000:50:00.0", 2, 0x030200 },
        { "0000:51:00.0", 2, 0x010802 }, { "0000:70:00.0", 3, 0x030200 }, { "0000:71:00.0", 3, 0x020000 },
        { "0000:80:00.0", -1, 0x030200 },
};
#define N_HOST_DEVS (sizeof(host_devs) / sizeof(host_devs[0]))

static struct hostmap *make_host(void) {
        struct hostmap *h = fake_host_4n(fake_host_slit, fake_host_sockets);
        for (size_t i = 0; i < N_HOST_DEVS; i++)
                fake_host_add_dev(h, host_devs[i].bdf, host_devs[i].node, host_devs[i].class);
        hostmap_finish(h);
        return h;
}

static char *generate(unsigned n) {
        struct strbuf b = {0};
        unsigned cells = 1 + pick(4);
        bool qemu = chance(20);
        strbuf_printf(&b, "<domain type=\"kvm\"%s>\n", qemu ? " xmlns:qemu=\"" QEMU_URI "\"" : "");
        strbuf_printf(&b, "  <name>prop-%u</name>\n  <uuid>0b7a5b3e-8d4c-4a3f-9c55-%012x</uuid>\n", n, n);
        if (chance(30))
                strbuf_append(&b, "  <title>it's &quot;a&quot; &amp; &lt;b&gt;</title>\n");
        if (chance(30))
                strbuf_append(&b, "  <description>'quoted' &quot;too&quot; &amp; &lt;tag&gt; 100%</description>\n");
        if (chance(30))
                strbuf_append(&b, "  <metadata>\n    <app:info xmlns:app=\"urn:example:app\" note=\"it's &quot;x&quot; &amp; &lt;y&gt;\">hi</app:info>\n  </metadata>\n");
        strbuf_printf(&b, "  <memory unit=\"MiB\">%u</memory>\n  <vcpu placement=\"static\">%u</vcpu>\n", 512 * cells, 2 * cells);
        strbuf_printf(&b, "  <os>\n    <type arch=\"x86_64\" machine=\"%s\">hvm</type>\n  </os>\n", chance(50) ? "q35" : "pc-q35-7.2");
        strbuf_append(&b, "  <features>\n    <acpi/>\n    <apic/>\n  </features>\n  <cpu mode=\"host-passthrough\">\n    <numa>\n");
        for (unsigned c = 0; c < cells; c++)
                strbuf_printf(&b, "      <cell id=\"%u\" cpus=\"%u-%u\" memory=\"512\" unit=\"MiB\"/>\n", c, 2 * c, 2 * c + 1);
        strbuf_append(&b, "    </numa>\n  </cpu>\n  <numatune>\n");
        for (unsigned c = 0; c < cells; c++)
                strbuf_printf(&b, "    <memnode cellid=\"%u\" mode=\"strict\" nodeset=\"%u\"/>\n", c, cells == 4 ? c : pick(4));
        strbuf_append(&b, "  </numatune>\n  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n"
                          "    <controller type=\"pci\" index=\"0\" model=\"pcie-root\"/>\n");
        bool user_port = chance(20);
        if (user_port)
                strbuf_append(&b, "    <controller type=\"pci\" index=\"1\" model=\"pcie-root-port\">\n"
                                  "      <model name=\"pcie-root-port\"/>\n"
                                  "      <target chassis=\"1\" port=\"0x10\"/>\n"
                                  "      <address type=\"pci\" domain=\"0x0000\" bus=\"0x00\" slot=\"0x04\" function=\"0x0\"/>\n"
                                  "    </controller>\n");
        bool used[N_HOST_DEVS] = {0};
        unsigned n_dev = 1 + pick(5), slot = 5;
        for (unsigned i = 0; i < n_dev; i++) {
                unsigned k = pick(N_HOST_DEVS);
                if (used[k] || (host_devs[k].node < 0 && chance(70)))
                        continue;
                used[k] = true;
                struct pci_addr a;
                assert_int_equal(pci_addr_parse(host_devs[k].bdf, &a), 0);
                strbuf_printf(&b, "    <hostdev mode=\"subsystem\" type=\"pci\"%s>\n      <source>\n"
                                  "        <address domain=\"0x0000\" bus=\"0x%02x\" slot=\"0x00\" function=\"0x0\"/>\n      </source>\n",
                              chance(70) ? " managed=\"yes\"" : "", a.bus);
                if (user_port && i == 0)
                        strbuf_append(&b, "      <address type=\"pci\" domain=\"0x0000\" bus=\"0x01\" slot=\"0x00\" function=\"0x0\"/>\n");
                else if (chance(30))
                        strbuf_printf(&b, "      <address type=\"pci\" domain=\"0x0000\" bus=\"0x00\" slot=\"0x%02x\" function=\"0x0\"/>\n", slot++);
                strbuf_append(&b, "    </hostdev>\n");
        }
        if (chance(50))
                strbuf_append(&b, "    <interface type=\"network\">\n      <mac address=\"52:54:00:6d:90:01\"/>\n"
                                  "      <source network=\"default\"/>\n      <model type=\"virtio\"/>\n"
                                  "      <address type=\"pci\" domain=\"0x0000\" bus=\"0x00\" slot=\"0x03\" function=\"0x0\"/>\n"
                                  "    </interface>\n");
        strbuf_append(&b, "    <memballoon model=\"virtio\"/>\n  </devices>\n");
        if (qemu)
                strbuf_append(&b, "  <qemu:commandline>\n    <qemu:arg value=\"-S\"/>\n    <qemu:env name=\"X\" value=\"it's\"/>\n  </qemu:commandline>\n");
        strbuf_append(&b, "</domain>\n");
        return strbuf_steal(&b);
}

/* ---- golden cases -------------------------------------------------------------------- */

static void run_golden(void) {
        size_t n;
        _cleanup_free_ char **names = dir_names(golden_dir, &n);
        unsigned cases = 0;
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *dirp = xasprintf("%s/%s", golden_dir, names[i]);
                _cleanup_free_ char *inp = xasprintf("%s/input.xml", dirp), *hostp = xasprintf("%s/host", dirp),
                                    *argsp = xasprintf("%s/args", dirp);
                _cleanup_free_ char *input = read_text(inp), *hostname = read_text(hostp), *args = read_text(argsp);
                if (!input || !hostname) {
                        free(names[i]);
                        continue;
                }
                hostname[strcspn(hostname, "\n")] = 0;
                _cleanup_free_ char *root = xasprintf("%s/%s", hosts_dir, hostname);
                _cleanup_hostmap_ struct hostmap *h = NULL;
                _cleanup_free_ char *err = NULL;
                if (hostmap_load_path(root, &h, &err) < 0)
                        fail_msg("%s: host %s: %s", names[i], root, err);
                _cleanup_policy_ struct policy *pol = NULL;
                enum policy_mode mode = POLICY_LEGACY;
                bool forced = false;
                const char *pf = args ? strstr(args, "--policy-file ") : NULL;
                const char *pm = args ? strstr(args, "--policy ") : NULL;
                if (pf) {
                        _cleanup_free_ char *pp = xasprintf("%s/policy.json", dirp);
                        _cleanup_free_ char *text = read_text(pp);
                        if (!text || policy_parse(text, strlen(text), pp, &pol, &err) < 0) {
                                free(names[i]);
                                continue;   /* a bad-policy case */
                        }
                } else if (pm) {
                        _cleanup_free_ char *word = xstrndup(pm + 9, strcspn(pm + 9, " \n"));
                        if (policy_mode_from_string(word, &mode) < 0) {
                                free(names[i]);
                                continue;   /* an unknown policy: the case expects an error */
                        }
                        forced = true;
                } else
                        pol = policy_new_default();
                /* a case whose input is refused as bad input (expected.exit 2) */
                _cleanup_domain_ struct domain *probe = NULL;
                _cleanup_free_ char *perr = NULL;
                if (domain_parse(input, strlen(input), &probe, &perr) < 0) {
                        free(names[i]);
                        continue;
                }
                _cleanup_free_ char *cname = xasprintf("golden-%s", names[i]);
                struct engine_result *probe_res = NULL;
                _cleanup_free_ char *e2 = NULL;
                int r = engine_plan(input, strlen(input), h, pol, forced ? &mode : NULL, &probe_res, &e2);
                engine_result_free(probe_res);
                /* libvirt-skip: the input is not one libvirt accepts (the
                 * case says why), so neither are the documents made from it */
                _cleanup_free_ char *skipp = xasprintf("%s/libvirt-skip", dirp);
                _cleanup_free_ char *skip = read_text(skipp);
                if (r >= 0) {
                        run_case(cname, input, h, pol, forced ? &mode : NULL, 6, skip ? 0 : 2);
                        cases++;
                }
                free(names[i]);
        }
        printf("# golden cases run: %u\n", cases);
        assert_true(cases > 50);
}

static void test_property(void **state) {
        (void) state;
        if (golden_dir)
                run_golden();
        _cleanup_hostmap_ struct hostmap *h = make_host();
        static const enum policy_mode modes[] = { POLICY_REQUIRE, POLICY_SOCKET, POLICY_PREFERRED, POLICY_LEGACY };
        for (unsigned i = 0; i < N_GENERATED; i++) {
                _cleanup_free_ char *xml = generate(i);
                _cleanup_free_ char *name = xasprintf("gen-%04u", i);
                enum policy_mode m = modes[pick(4)];
                run_case(name, xml, h, NULL, &m, 2, 1);
        }

        printf("# seed 0x9e3779b97f4a7c15, %u generated domains%s\n", N_GENERATED, golden_dir ? " plus the golden cases" : "");
        printf("# domains %u: planned %u, not planned (refused, skipped, unchanged) %u\n", count.domains, count.planned,
               count.not_applied);
        printf("# unedited: revert(plan(x)) == x canonically: %u of %u\n", count.unedited_equal, count.planned);
        printf("# edited plans %u: reverted %u (%u with a warning), refused (mark edited) %u; planned again %u, "
               "refused or skipped then %u\n", count.edited, count.reverted, count.warned, count.refused, count.replanned,
               count.replan_refused);
        for (int k = 0; k < _EDIT_MAX; k++)
                printf("#   edit '%s': %u\n", edit_names[k], count.edits[k]);
        if (out_dir)
                printf("# documents written to %s: %u\n", out_dir, count.written);
        /* the property must have been exercised, not skipped */
        assert_true(count.planned > N_GENERATED / 3);
        assert_true(count.unedited_equal == count.planned);
        assert_true(count.reverted > N_GENERATED / 3);
        assert_true(count.warned > 0);
        assert_true(count.refused > 0);
        assert_true(count.replanned > 0);
        for (int k = 0; k < _EDIT_MAX; k++)
                assert_true(count.edits[k] > 0);
}

int main(int argc, char **argv) {
        for (int i = 1; i < argc; i++) {
                if (streq(argv[i], "--golden") && i + 1 < argc)
                        golden_dir = argv[++i];
                else if (streq(argv[i], "--hosts") && i + 1 < argc)
                        hosts_dir = argv[++i];
                else if (streq(argv[i], "--out") && i + 1 < argc)
                        out_dir = argv[++i];
                else if (streq(argv[i], "--every") && i + 1 < argc)
                        every = (unsigned) atoi(argv[++i]);
                else {
                        fprintf(stderr, "usage: %s [--golden CASES --hosts SYSFS-TREES] [--out DIR [--every N]]\n", argv[0]);
                        return 2;
                }
        }
        if (!!golden_dir != !!hosts_dir || every == 0) {
                fprintf(stderr, "--golden and --hosts go together; --every must be positive\n");
                return 2;
        }
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_property),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
