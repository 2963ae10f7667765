/* The metadata mark's format (mark.h): builder, writer, parser and
 * matcher (the locator is xmlutil's, xml_locate_mark()).  The mark is input like any other: the parser checks every
 * value a revert would write back into the domain, and refuses what pcinuma
 * never writes.  Pure. */
#include "mark.h"

#include <libxml/chvalid.h>
#include <libxml/parser.h>
#include <strings.h>

#include "domain.h"
#include "fingerprint.h"
#include "planner.h"
#include "sha256.h"

void mark_done(struct mark *m) {
        free(m->version);
        free(m->policy);
        free(m->migratable);
        free(m->migratable_reason);
        free(m->metadata_created);
        free(m->single_function_slots);
        free(m->distances);
        free(m->pcie_root_created);
        free(m->pcihole64_original);
        free(m->pcihole64_original_unit);
        free(m->ovmf_mmio64);
        free(m->qemu_ns_added);
        free(m->nccl_topology);
        free(m->nccl_topology_sha256);
        free(m->fingerprint);
        free(m->fingerprint_version);
        for (size_t i = 0; i < m->n_expanders; i++)
                free(m->expanders[i].host_nodes);
        free(m->expanders);
        for (size_t i = 0; i < m->n_devices; i++) {
                free(m->devices[i].host);
                free(m->devices[i].mdev);
                free(m->devices[i].original_address);
                free(m->devices[i].position);
                free(m->devices[i].vendor_device);
                free(m->devices[i].driver);
                free(m->devices[i].mdev_type);
        }
        free(m->devices);
        for (size_t i = 0; i < m->n_controllers; i++)
                free(m->controllers[i].model);
        free(m->controllers);
        for (size_t i = 0; i < m->n_managed; i++) {
                free(m->managed[i].host);
                free(m->managed[i].driver);
                free(m->managed[i].original);
        }
        free(m->managed);
        for (size_t i = 0; i < m->n_removed; i++) {
                free(m->removed[i].xml);
                if (m->removed[i].elem)
                        xmlFreeNode(m->removed[i].elem);
        }
        free(m->removed);
        for (size_t i = 0; i < m->n_cliques; i++) {
                free(m->cliques[i].host);
                free(m->cliques[i].alias);
                free(m->cliques[i].alias_original);
                free(m->cliques[i].override);
        }
        free(m->cliques);
        free(m->qemu_override);
        free(m->order);
        *m = (struct mark) {0};
}

static char *escape_value(const char *s);

/* --- builder --------------------------------------------------------------- */

bool mark_migratable(const struct plan *p, const struct domain *d, char **ret_why) {
        if (!p->settings.migration_same_topology) {
                if (ret_why)
                        *ret_why = xstrdup("the policy says migration: refuse");
                return false;
        }
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (d->hostdevs[pd->hostdev].kind != DOMAIN_HOSTDEV_PCI || (pd->action == PLAN_MOVE && pd->fingerprinted))
                        continue;
                if (ret_why && pd->action == PLAN_MOVE)
                        *ret_why = xasprintf("%s: class 0x%06x is not one the topology fingerprint covers, so the mark "
                                             "records no position a destination could map", pd->name, pd->class);
                else if (ret_why)
                        *ret_why = xasprintf("%s is not placed under an expander bus, so the mark records no position a "
                                             "destination could map (%s)", pd->name, pd->reason ? pd->reason : "it stays on pcie.0");
                return false;
        }
        return true;
}

void mark_build(const struct plan *p, const struct domain *d, struct mark *ret) {
        struct mark m = {0};
        m.version = xstrdup("1");
        m.policy = xstrdup(policy_mode_to_string(p->mode));
        /* The policy's answer (docs/policy.md "migration"), "no" for a
         * device the mark cannot place. */
        m.migratable = xstrdup(mark_migratable(p, d, &m.migratable_reason) ? "yes" : "no");
        if (p->fingerprint) {
                m.fingerprint = xstrdup(p->fingerprint);
                m.fingerprint_version = xasprintf("%d", FINGERPRINT_VERSION);
        }
        if (p->add_distances)
                m.distances = xstrdup("host");
        for (size_t i = 0; i < p->n_pxbs; i++) {
                const struct plan_pxb *x = &p->pxbs[i];
                *GROW(m.expanders, m.n_expanders) = (struct mark_expander) {
                        .controller = x->index, .guest_cell = (int) x->cell,
                        .host_nodes = xstrdup(x->host_nodes), .bus_nr = x->bus_nr,
                };
        }
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                const struct domain_hostdev *hd = &d->hostdevs[pd->hostdev];
                bool mdev = hd->kind == DOMAIN_HOSTDEV_MDEV;
                *GROW(m.devices, m.n_devices) = (struct mark_device) {
                        .host = mdev ? NULL : xstrdup(pd->name), .mdev = mdev ? xstrdup(hd->mdev_uuid) : NULL,
                        .class = pd->class, .host_node = pd->host_node,
                        .host_socket = pd->host_socket >= 0 ? pd->host_socket : -1,
                        .guest_cell = pd->cell, .controller = pd->port_index,
                        .position = pd->position ? xstrdup(pd->position) : NULL,
                        .vendor_device = pd->vendor_device[0] ? xstrdup(pd->vendor_device) : NULL,
                        .driver = pd->driver[0] ? xstrdup(pd->driver) : NULL,
                        .mdev_type = mdev && pd->mdev_type ? xstrdup(pd->mdev_type) : NULL,
                };
        }
        /* Ports that carry no device themselves: a guest switch's root
         * and upstream ports. */
        for (size_t i = 0; i < p->n_ports; i++)
                if (p->ports[i].device < 0)
                        *GROW(m.controllers, m.n_controllers) = (struct mark_controller) {
                                .index = p->ports[i].index, .model = xstrdup(p->ports[i].model),
                        };
        for (size_t i = 0; i < p->n_managed; i++)
                *GROW(m.managed, m.n_managed) = (struct mark_managed) {
                        .host = xstrdup(p->managed[i].name), .driver = xstrdup(p->managed[i].driver),
                };
        for (size_t i = 0; i < p->n_pruned; i++)
                *GROW(m.removed, m.n_removed) = (struct mark_removed) { .controller = p->pruned[i], .position = -1 };
        if (p->nccl_arg) {
                char hex[SHA256_HEX_SIZE];
                m.nccl_topology_sha256 = xstrdup(sha256_hex(p->nccl_arg, strlen(p->nccl_arg), hex));
        }
        /* The alias and what was there the rewrite fills in. */
        for (size_t i = 0; i < p->n_cliques; i++)
                *GROW(m.cliques, m.n_cliques) = (struct mark_clique) {
                        .host = xstrdup(p->devices[p->cliques[i].device].name), .id = (int) p->cliques[i].id,
                };
        *ret = m;
}

/* --- writer ---------------------------------------------------------------- */

/* A child element <pcinuma:NAME> of the mark, after the indentation text
 * 'cind' (pretty-printed input) or none. */
static xmlNodePtr mark_child(xmlNodePtr mark, const char *cind, const char *name) {
        if (*cind)
                xmlAddChild(mark, xmlNewDocText(mark->doc, (const xmlChar *) cind));
        return xmlNewChild(mark, mark->ns, (const xmlChar *) name, NULL);
}

static void write_attrs(const struct mark *m, xmlNodePtr mark) {
        xml_set_prop(mark, "version", m->version);
        xml_set_prop(mark, "policy", m->policy);
        xml_set_prop(mark, "migratable", m->migratable);
        xml_set_prop(mark, "migratable-reason", m->migratable_reason);
        xml_set_prop(mark, "metadata-created", m->metadata_created);
        xml_set_prop(mark, "single-function-slots", m->single_function_slots);
        xml_set_prop(mark, "distances", m->distances);
        xml_set_prop(mark, "pcie-root-created", m->pcie_root_created);
        xml_set_prop(mark, "pcihole64-original", m->pcihole64_original);
        xml_set_prop(mark, "pcihole64-original-unit", m->pcihole64_original_unit);
        xml_set_prop(mark, "ovmf-mmio64", m->ovmf_mmio64);
        xml_set_prop(mark, "qemu-ns-added", m->qemu_ns_added);
        xml_set_prop(mark, "nccl-topology", m->nccl_topology);
        xml_set_prop(mark, "nccl-topology-sha256", m->nccl_topology_sha256);
        xml_set_prop(mark, "fingerprint", m->fingerprint);
        xml_set_prop(mark, "fingerprint-version", m->fingerprint_version);
        xml_set_prop(mark, "qemu-override", m->qemu_override);
}

static void write_device(const struct mark_device *md, xmlNodePtr e) {
        if (md->mdev)
                xml_set_prop(e, "mdev", md->mdev);
        else
                xml_set_prop(e, "host", md->host);
        if (md->class) {
                char v[16];
                snprintf(v, sizeof v, "0x%06x", md->class);
                xml_set_prop(e, "class", v);
        }
        xml_set_prop_int(e, "host-node", md->host_node);
        if (md->host_socket >= 0)
                xml_set_prop_int(e, "host-socket", md->host_socket);
        xml_set_prop_int(e, "guest-cell", md->guest_cell);
        xml_set_prop_int(e, "controller", md->controller);
        xml_set_prop(e, "original-address", md->original_address);
        xml_set_prop(e, "vendor-device", md->vendor_device);
        xml_set_prop(e, "driver", md->driver);
        xml_set_prop(e, "mdev-type", md->mdev_type);
        xml_set_prop(e, "position", md->position);
}

/* With the XML library's node and attribute API: every value is escaped
 * by the serialiser, whatever characters the input's attributes hold. */
xmlNodePtr mark_write(const struct mark *m, xmlDocPtr doc, const char *cind, const char *endind) {
        xmlNodePtr mark = xmlNewDocNode(doc, NULL, (const xmlChar *) "topology", NULL);
        xmlSetNs(mark, xmlNewNs(mark, (const xmlChar *) PCINUMA_TOPOLOGY_NS, (const xmlChar *) "pcinuma"));
        write_attrs(m, mark);
        for (size_t i = 0; i < m->n_expanders; i++) {
                const struct mark_expander *x = &m->expanders[i];
                xmlNodePtr e = mark_child(mark, cind, "expander");
                xml_set_prop_int(e, "controller", x->controller);
                xml_set_prop_int(e, "guest-cell", x->guest_cell);
                xml_set_prop(e, "host-nodes", x->host_nodes);
                xml_set_prop_int(e, "busNr", x->bus_nr);
        }
        for (size_t i = 0; i < m->n_devices; i++)
                write_device(&m->devices[i], mark_child(mark, cind, "device"));
        for (size_t i = 0; i < m->n_controllers; i++) {
                xmlNodePtr e = mark_child(mark, cind, "controller");
                xml_set_prop_int(e, "index", m->controllers[i].index);
                xml_set_prop(e, "model", m->controllers[i].model);
        }
        for (size_t i = 0; i < m->n_managed; i++) {
                xmlNodePtr e = mark_child(mark, cind, "managed");
                xml_set_prop(e, "host", m->managed[i].host);
                xml_set_prop(e, "driver", m->managed[i].driver);
                xml_set_prop(e, "original", m->managed[i].original);
        }
        for (size_t i = 0; i < m->n_removed; i++) {
                xmlNodePtr e = mark_child(mark, cind, "removed");
                xml_set_prop_int(e, "controller", m->removed[i].controller);
                xml_set_prop_int(e, "position", m->removed[i].position);
                /* The controller's XML as text (escaped on output). */
                xmlNodeAddContent(e, (const xmlChar *) (m->removed[i].xml ? m->removed[i].xml : ""));
        }
        for (size_t i = 0; i < m->n_cliques; i++) {
                xmlNodePtr e = mark_child(mark, cind, "clique");
                xml_set_prop(e, "host", m->cliques[i].host);
                xml_set_prop_int(e, "id", m->cliques[i].id);
                xml_set_prop(e, "alias", m->cliques[i].alias);
                xml_set_prop(e, "alias-original", m->cliques[i].alias_original);
                xml_set_prop(e, "override", m->cliques[i].override);
        }
        if (*endind)
                xmlAddChild(mark, xmlNewDocText(doc, (const xmlChar *) endind));
        return mark;
}

/* --- original-address ------------------------------------------------------ */

char *mark_address_encode(xmlNodePtr e) {
        struct strbuf b = {0};
        for (xmlAttrPtr a = e->properties; a; a = a->next) {
                xmlChar *v = xmlNodeListGetString(e->doc, a->children, 1);
                if (b.len)
                        strbuf_append(&b, " ");
                strbuf_printf(&b, "%s=", (const char *) a->name);
                for (const char *c = v ? (const char *) v : ""; *c; c++) {
                        if (*c == '%' || *c == ' ' || *c == '\t' || *c == '\n' || *c == '\r')
                                strbuf_printf(&b, "%%%02x", (unsigned char) *c);
                        else
                                strbuf_appendn(&b, c, 1);
                }
                xmlFree(v);
        }
        return strbuf_steal(&b);
}

static int hexval(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Is s UTF-8 made only of characters XML 1.0 allows (no U+FFFE, no
 * surrogates...)?  A value written back otherwise would not parse. */
static bool xml_text_allowed(const char *s) {
        const xmlChar *p = (const xmlChar *) s;
        while (*p) {
                int len = 4;
                int c = xmlGetUTF8Char(p, &len);
                if (c < 0 || len <= 0 || !xmlIsCharQ(c))
                        return false;
                p += len;
        }
        return true;
}

int mark_address_decode(xmlNodePtr e, const char *s, char **ret_error) {
        _cleanup_free_ char *copy = xstrdup(s), *es = escape_value(s);
        while (e->properties)
                xmlRemoveProp(e->properties);
        char *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
                char *eq = strchr(tok, '=');
                if (!eq || eq == tok)
                        return set_error(ret_error, -EINVAL, "pcinuma mark: bad original-address '%s': the mark is refused and nothing was changed", es);
                *eq = 0;
                /* The mark is input too: only a real attribute name may come
                 * back, or a crafted mark could smuggle markup into the XML. */
                if (xmlValidateNCName((const xmlChar *) tok, 0) != 0)
                        return set_error(ret_error, -EINVAL, "pcinuma mark: bad attribute name in original-address '%s': the mark is refused and nothing was changed", es);
                char *v = eq + 1, *w = v;
                for (char *r = v; *r; r++) {
                        unsigned char c = (unsigned char) *r;
                        if (*r == '%' && hexval(r[1]) >= 0 && hexval(r[2]) >= 0) {
                                c = (unsigned char) (hexval(r[1]) * 16 + hexval(r[2]));
                                r += 2;
                        }
                        /* The value must come back as text XML 1.0 allows:
                         * a decoded control character (or NUL) would make
                         * the reverted domain XML that does not parse. */
                        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
                                return set_error(ret_error, -EINVAL,
                                                 "pcinuma mark: a control character in original-address '%s': the mark is refused and nothing was changed", es);
                        *w++ = (char) c;
                }
                *w = 0;
                if (!xml_text_allowed(v))
                        return set_error(ret_error, -EINVAL,
                                         "pcinuma mark: original-address '%s' does not decode to characters XML allows: the mark is refused and nothing was changed", es);
                xml_set_prop(e, tok, v);
        }
        return 0;
}

/* An original-address must decode, and a PCI one (or one without a type)
 * must be one the domain parser reads, or the revert would leave a domain
 * that does not load.  The same reading as the revert does, on a scratch
 * element. */
static int check_original_address(xmlDocPtr doc, const char *orig, char **ret_error) {
        xmlNodePtr scratch = xmlNewDocNode(doc, NULL, (const xmlChar *) "address", NULL);
        int r = mark_address_decode(scratch, orig, ret_error);
        struct pci_addr a;
        _cleanup_free_ char *type = r == 0 ? xml_prop(scratch, "type") : NULL;
        if (r == 0 && (!type || streq(type, "pci")) && xml_parse_pci_address(scratch, &a) < 0) {
                _cleanup_free_ char *e = escape_value(orig);
                r = set_error(ret_error, -EINVAL,
                              "pcinuma mark: original-address='%s' is not a PCI address: the mark is refused and nothing was changed", e);
        }
        xmlFreeNode(scratch);
        return r;
}

/* --- parser ---------------------------------------------------------------- */

/* The PCI controller models libvirt knows: a <pcinuma:removed> may bring
 * back only one of these. */
static bool known_pci_model(const char *m) {
        static const char *const models[] = {
                "pci-root", "pcie-root", "pci-bridge", "dmi-to-pci-bridge", "pcie-root-port",
                "pcie-switch-upstream-port", "pcie-switch-downstream-port", "pci-expander-bus",
                "pcie-expander-bus", "pcie-to-pci-bridge",
        };
        for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
                if (streq(m, models[i]))
                        return true;
        return false;
}

/* The first element or attribute under and including e with a prefix
 * that no namespace declaration binds (libxml2 keeps it in the name, and
 * writes it back as it is: XML that does not parse), or NULL. */
static const char *undeclared_prefix(xmlNodePtr e) {
        if (strchr((const char *) e->name, ':'))
                return (const char *) e->name;
        for (xmlAttrPtr a = e->properties; a; a = a->next)
                if (strchr((const char *) a->name, ':'))
                        return (const char *) a->name;
        for (xmlNodePtr c = e->children; c; c = c->next) {
                const char *n = c->type == XML_ELEMENT_NODE ? undeclared_prefix(c) : NULL;
                if (n)
                        return n;
        }
        return NULL;
}

/* Why a <pcinuma:removed controller=N> that parsed to 'list' cannot be
 * restored, or 0; *ret_elem is its one element when it has one. */
static int check_removed(xmlNodePtr list, int index, xmlNodePtr *ret_elem, char **ret_error) {
        xmlNodePtr elem = NULL;
        const char *bad = NULL;
        for (xmlNodePtr c = list; c && !bad; c = c->next) {
                if (xml_is_ws_text(c))
                        continue;
                if (c->type == XML_ELEMENT_NODE && !elem)
                        elem = c;
                else
                        bad = c->type == XML_ELEMENT_NODE ? (const char *) c->name : "text";
        }
        if (!bad && !elem)
                bad = "nothing";
        else if (!bad && !(xml_is(elem, "controller") && xml_prop_is(elem, "type", "pci")))
                bad = (const char *) elem->name;
        *ret_elem = elem;
        _cleanup_free_ char *model = elem && !bad ? xml_prop(elem, "model") : NULL;
        _cleanup_free_ char *idx = elem && !bad ? xml_prop(elem, "index") : NULL;
        uint64_t v;
        if (bad)
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: <pcinuma:removed controller='%d'> holds %s%s%s, not one <controller type='pci'>; "
                                 "a mark can only restore the PCI controllers pcinuma removed: the mark is refused and nothing was changed",
                                 index, streq(bad, "text") || streq(bad, "nothing") ? "" : "<", bad,
                                 streq(bad, "text") || streq(bad, "nothing") ? "" : ">");
        if (model && !known_pci_model(model))
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: <pcinuma:removed controller='%d'> holds a PCI controller of unknown model '%s': "
                                 "the mark is refused and nothing was changed", index, model);
        if (idx && (parse_uint(idx, 0, 255, &v) < 0 || (int) v != index))
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: <pcinuma:removed controller='%d'> holds <controller index='%s'>: "
                                 "the mark is refused and nothing was changed", index, idx);
        if (undeclared_prefix(elem))
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: <pcinuma:removed controller='%d'> holds a controller with an undeclared prefix (%s): "
                                 "the mark is refused and nothing was changed", index, undeclared_prefix(elem));
        _cleanup_free_ char *why = NULL;
        if (domain_check_controller(elem, &why) < 0)
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: <pcinuma:removed controller='%d'> holds a controller that is not valid (%s): "
                                 "the mark is refused and nothing was changed", index, why);
        return 0;
}

/* Parse the text of a <pcinuma:removed controller=N> into the controller
 * it held.  It must be exactly one <controller type='pci'> (index N if it
 * says one, a model libvirt knows): a mark is input like any other, and a
 * forged one must not bring a <disk> or a <hostdev> into the domain.  (What
 * the controller holds is the input's own, as the rewrite found it.) */
static int parse_removed(xmlNodePtr devices, xmlNodePtr rec, int index, xmlNodePtr *ret, char **ret_error) {
        xmlChar *text = xmlNodeGetContent(rec);
        xmlNodePtr list = NULL;
        xmlParserErrors pr = xmlParseInNodeContext(devices, text ? (const char *) text : "", text ? xmlStrlen(text) : 0,
                                                   XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING, &list);
        xmlFree(text);
        if (pr != XML_ERR_OK) {
                xmlFreeNodeList(list);
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: <pcinuma:removed controller='%d'> does not hold well-formed XML (error %d); "
                                 "the mark is refused and nothing was changed", index, (int) pr);
        }
        xmlNodePtr elem = NULL;
        int r = check_removed(list, index, &elem, ret_error);
        if (r < 0) {
                xmlFreeNodeList(list);
                return r;
        }
        /* Detach elem from the list and free the rest. */
        if (elem->prev)
                elem->prev->next = elem->next;
        else
                list = elem->next;
        if (elem->next)
                elem->next->prev = elem->prev;
        elem->next = elem->prev = NULL;
        elem->parent = NULL;
        xmlFreeNodeList(list);
        *ret = elem;
        return 0;
}

/* An integer attribute, or -1 when it is absent or not one. */
static int int_prop(xmlNodePtr n, const char *name, int base) {
        _cleanup_free_ char *s = xml_prop(n, name);
        uint64_t v;
        return s && parse_uint(s, base, INT32_MAX, &v) == 0 ? (int) v : -1;
}

static bool is_letters(const char *s) {
        if (!*s)
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
                        return false;
        return true;
}

void mark_parse_attrs(xmlNodePtr node, struct mark *m) {
        m->version = xml_prop(node, "version");
        m->policy = xml_prop(node, "policy");
        m->migratable = xml_prop(node, "migratable");
        m->migratable_reason = xml_prop(node, "migratable-reason");
        /* Free text that goes into messages and logs: one line. */
        for (char *c = m->migratable_reason; c && *c; c++)
                if ((unsigned char) *c < 0x20 || *c == 0x7f)
                        *c = ' ';
        m->metadata_created = xml_prop(node, "metadata-created");
        m->single_function_slots = xml_prop(node, "single-function-slots");
        m->distances = xml_prop(node, "distances");
        m->pcie_root_created = xml_prop(node, "pcie-root-created");
        m->pcihole64_original = xml_prop(node, "pcihole64-original");
        m->pcihole64_original_unit = xml_prop(node, "pcihole64-original-unit");
        m->ovmf_mmio64 = xml_prop(node, "ovmf-mmio64");
        m->qemu_ns_added = xml_prop(node, "qemu-ns-added");
        m->nccl_topology = xml_prop(node, "nccl-topology");
        m->nccl_topology_sha256 = xml_prop(node, "nccl-topology-sha256");
        m->fingerprint = xml_prop(node, "fingerprint");
        m->fingerprint_version = xml_prop(node, "fingerprint-version");
        m->qemu_override = xml_prop(node, "qemu-override");
}

/* A value for a message: backslash, quote and control characters escaped
 * (C style), so a forged value cannot start a line of its own.
 * malloc'ed. */
static char *escape_value(const char *s) {
        struct strbuf b = {0};
        for (; *s; s++) {
                unsigned char c = (unsigned char) *s;
                if (c == '\\' || c == '\'')
                        strbuf_printf(&b, "\\%c", c);
                else if (c == '\n')
                        strbuf_append(&b, "\\n");
                else if (c == '\r')
                        strbuf_append(&b, "\\r");
                else if (c == '\t')
                        strbuf_append(&b, "\\t");
                else if (c < 0x20 || c == 0x7f)
                        strbuf_printf(&b, "\\x%02x", c);
                else
                        strbuf_appendn(&b, s, 1);
        }
        return strbuf_steal(&b);
}

/* -EINVAL: attribute 'attr' of the mark's element 'elem' holds 'value',
 * which is not 'want'. */
static int bad_value(char **ret_error, const char *elem, const char *attr, const char *value, const char *want) {
        _cleanup_free_ char *v = escape_value(value);
        return set_error(ret_error, -EINVAL, "pcinuma mark: <pcinuma:%s %s='%s'>: not %s: the mark is refused and nothing was changed",
                         elem, attr, v, want);
}

static bool is_in_set(const char *s, const char *chars) {
        return *s && strspn(s, chars) == strlen(s);
}

#define NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
#define HEX_CHARS "0123456789abcdefABCDEF"

static bool is_hex(const char *s, size_t n) {
        return strlen(s) == n && is_in_set(s, HEX_CHARS);
}

/* A position as fingerprint_position() writes it: kind:digest@name items
 * separated by spaces, the names BDFs, slots, host bridges or "none". */
static bool is_position(const char *s) {
        return is_in_set(s, NAME_CHARS ":@ ");
}

/* The mark element's own attributes that reach messages or comparisons. */
static int check_values(const struct mark *m, char **ret_error) {
        uint64_t v;
        if (m->migratable && !streq(m->migratable, "yes") && !streq(m->migratable, "no"))
                return bad_value(ret_error, "topology", "migratable", m->migratable, "yes or no");
        if (m->policy && !is_in_set(m->policy, "abcdefghijklmnopqrstuvwxyz-"))
                return bad_value(ret_error, "topology", "policy", m->policy, "a policy mode name");
        if (m->nccl_topology_sha256 && !is_hex(m->nccl_topology_sha256, SHA256_HEX_SIZE - 1))
                return bad_value(ret_error, "topology", "nccl-topology-sha256", m->nccl_topology_sha256, "a SHA-256 (64 hex digits)");
        if (m->fingerprint && !is_hex(m->fingerprint, SHA256_HEX_SIZE - 1))
                return bad_value(ret_error, "topology", "fingerprint", m->fingerprint, "a SHA-256 (64 hex digits)");
        if (m->fingerprint_version &&
            (!is_in_set(m->fingerprint_version, "0123456789") || parse_uint(m->fingerprint_version, 10, INT32_MAX, &v) < 0))
                return bad_value(ret_error, "topology", "fingerprint-version", m->fingerprint_version, "a version number");
        return 0;
}

/* A <pcinuma:device>'s names and descriptions, as pcinuma writes them. */
static int check_device(xmlNodePtr c, char **ret_error) {
        static const char *const names[] = { "host", "mdev", "driver", "mdev-type", "position", "vendor-device" };
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                _cleanup_free_ char *v = xml_prop(c, names[i]);
                struct pci_addr a;
                if (!v)
                        continue;
                if (i == 0 && pci_addr_parse(v, &a) < 0)
                        return bad_value(ret_error, "device", names[i], v, "a PCI address");
                if (i == 1 && !uuid_is_valid(v))
                        return bad_value(ret_error, "device", names[i], v, "a UUID");
                if (i == 2 && !hostmap_driver_name_ok(v))
                        return bad_value(ret_error, "device", names[i], v, "a driver name (printable, no blank, no '/')");
                if (i == 3 && !is_in_set(v, NAME_CHARS))
                        return bad_value(ret_error, "device", names[i], v, "a name of letters, digits, '_', '.' and '-'");
                if (i == 4 && !is_position(v))
                        return bad_value(ret_error, "device", names[i], v, "a topology position");
                if (i == 5 && !(strlen(v) == 9 && v[4] == ':' && strspn(v, HEX_CHARS) == 4 && strspn(v + 5, HEX_CHARS) == 4))
                        return bad_value(ret_error, "device", names[i], v, "a vendor:device pair");
        }
        return 0;
}

/* The feature switches' attributes: values that the revert writes back
 * into the domain must be ones libvirt accepts. */
static int check_attrs(const struct mark *m, char **ret_error) {
        const char *hole = m->pcihole64_original, *unit = m->pcihole64_original_unit;
        uint64_t v;
        /* (the bound is the domain parser's, for a size in TiB) */
        if (hole && !streq(hole, "none") && parse_uint(hole, 10, UINT64_MAX / (1024ull * 1024 * 1024), &v) < 0) {
                _cleanup_free_ char *e = escape_value(hole);
                return set_error(ret_error, -EINVAL, "pcinuma mark: pcihole64-original='%s' is not a size: the mark is refused and nothing was changed", e);
        }
        if (unit && !is_letters(unit)) {
                _cleanup_free_ char *e = escape_value(unit);
                return set_error(ret_error, -EINVAL, "pcinuma mark: pcihole64-original-unit='%s' is not a unit: the mark is refused and nothing was changed", e);
        }
        static const char *const switches[] = { "ovmf-mmio64", "nccl-topology", "qemu-override" };
        const char *values[] = { m->ovmf_mmio64, m->nccl_topology, m->qemu_override };
        for (size_t i = 0; i < 3; i++)
                if (values[i] && !streq(values[i], "created") && !streq(values[i], "added")) {
                        _cleanup_free_ char *e = escape_value(values[i]);
                        return set_error(ret_error, -EINVAL,
                                         "pcinuma mark: %s='%s' is neither created nor added: the mark is refused and nothing was changed",
                                         switches[i], e);
                }
        return 0;
}

/* An element a mark may hold: one of its six records, in its namespace. */
static bool is_record(xmlNodePtr c, const char *name) {
        return xml_is_ns(c, PCINUMA_TOPOLOGY_NS, NULL) && (streq(name, "expander") || streq(name, "device") || streq(name, "controller") ||
                         streq(name, "managed") || streq(name, "removed") || streq(name, "clique"));
}

bool mark_is_alias_name(const char *s) {
        static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-";
        return s && *s && strspn(s, chars) == strlen(s);
}

bool mark_is_user_alias(const char *s) {
        static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
        return s && strncmp(s, "ua-", 3) == 0 && s[3] && strspn(s, chars) == strlen(s);
}

/* <pcinuma:clique>: the revert writes alias-original back as an alias and
 * looks the others up, so each must be what pcinuma writes. */
static int parse_clique(xmlNodePtr c, struct mark *m, char **ret_error) {
        _cleanup_free_ char *host = xml_prop(c, "host"), *alias = xml_prop(c, "alias");
        _cleanup_free_ char *orig = xml_prop(c, "alias-original"), *ovr = xml_prop(c, "override");
        int id = int_prop(c, "id", 10);
        struct pci_addr a;
        if (!host || pci_addr_parse(host, &a) < 0 || id < 0 || id > 15 || (!ovr && !mark_is_user_alias(alias)) ||
            (orig && !streq(orig, "none") && !mark_is_alias_name(orig)) || (ovr && !streq(ovr, "user")))
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: line %ld: a <pcinuma:clique> pcinuma does not write (it needs a host BDF, an id 0-15, "
                                 "a user alias ua-..., an alias-original that is 'none' or an alias name, override='user' or none): "
                                 "the mark is refused and nothing was changed", xmlGetLineNo(c));
        *GROW(m->cliques, m->n_cliques) = (struct mark_clique) {
                .host = TAKE_PTR(host), .id = id, .alias = TAKE_PTR(alias),
                .alias_original = TAKE_PTR(orig), .override = TAKE_PTR(ovr),
        };
        return 0;
}

static int parse_device(xmlNodePtr c, int controller, struct mark *m, char **ret_error) {
        int r = check_device(c, ret_error);
        if (r < 0)
                return r;
        _cleanup_free_ char *orig = xml_prop(c, "original-address");
        if (orig && !streq(orig, "none")) {
                r = check_original_address(c->doc, orig, ret_error);
                if (r < 0)
                        return r;
        }
        int class = int_prop(c, "class", 16);
        *GROW(m->order, m->n_order) = (struct mark_record_ref) { MARK_DEVICE, m->n_devices };
        *GROW(m->devices, m->n_devices) = (struct mark_device) {
                .host = xml_prop(c, "host"), .mdev = xml_prop(c, "mdev"),
                .class = class > 0 ? (unsigned) class : 0, .host_node = int_prop(c, "host-node", 10),
                .host_socket = int_prop(c, "host-socket", 10), .guest_cell = int_prop(c, "guest-cell", 10),
                .controller = controller, .original_address = TAKE_PTR(orig),
                .position = xml_prop(c, "position"), .vendor_device = xml_prop(c, "vendor-device"),
                .driver = xml_prop(c, "driver"), .mdev_type = xml_prop(c, "mdev-type"),
        };
        return 0;
}

static int parse_managed(xmlNodePtr c, struct mark *m, char **ret_error) {
        _cleanup_free_ char *orig = xml_prop(c, "original");
        _cleanup_free_ char *host = xml_prop(c, "host"), *driver = xml_prop(c, "driver");
        struct pci_addr a;
        if (orig && !streq(orig, "absent") && !streq(orig, "yes") && !streq(orig, "no"))
                return bad_value(ret_error, "managed", "original", orig, "yes, no or absent");
        if (host && pci_addr_parse(host, &a) < 0)
                return bad_value(ret_error, "managed", "host", host, "a PCI address");
        if (driver && !hostmap_driver_name_ok(driver))
                return bad_value(ret_error, "managed", "driver", driver, "a driver name (printable, no blank, no '/')");
        *GROW(m->managed, m->n_managed) = (struct mark_managed) {
                .host = TAKE_PTR(host), .driver = TAKE_PTR(driver), .original = TAKE_PTR(orig),
        };
        return 0;
}

static int parse_removed_record(xmlNodePtr c, xmlNodePtr devices, int controller, struct mark *m, char **ret_error) {
        _cleanup_free_ char *pos = xml_prop(c, "position");
        uint64_t p = 0;
        if (controller < 0 || !pos || parse_uint(pos, 10, INT32_MAX, &p) < 0)
                return set_error(ret_error, -EINVAL, "pcinuma mark: <removed> without a valid controller and position");
        if (!devices)
                return set_error(ret_error, -EINVAL, "pcinuma mark lists removed controllers but the domain has no <devices>");
        struct mark_removed *rc = GROW(m->removed, m->n_removed);
        *rc = (struct mark_removed) { .controller = controller, .position = (int) p };
        return parse_removed(devices, c, controller, &rc->elem, ret_error);
}

/* One child element of the mark, in document order. */
static int parse_record(xmlNodePtr c, xmlNodePtr devices, struct mark *m, char **ret_error) {
        const char *name = (const char *) c->name;
        if (!is_record(c, name))
                return set_error(ret_error, -EINVAL,
                                 "pcinuma mark: line %ld: <%s%s%s> is not part of a pcinuma mark: the mark is refused and nothing was changed",
                                 xmlGetLineNo(c), c->ns && c->ns->prefix ? (const char *) c->ns->prefix : "",
                                 c->ns && c->ns->prefix ? ":" : "", name);
        _cleanup_free_ char *ctl = xml_prop(c, "controller");
        uint64_t idx = 0;
        int controller = ctl && parse_uint(ctl, 10, 255, &idx) == 0 ? (int) idx : -1;

        if (streq(name, "expander")) {
                *GROW(m->order, m->n_order) = (struct mark_record_ref) { MARK_EXPANDER, m->n_expanders };
                *GROW(m->expanders, m->n_expanders) = (struct mark_expander) {
                        .controller = controller, .guest_cell = int_prop(c, "guest-cell", 10),
                        .host_nodes = xml_prop(c, "host-nodes"), .bus_nr = int_prop(c, "busNr", 10),
                };
                return 0;
        }
        if (streq(name, "controller")) {
                _cleanup_free_ char *index = xml_prop(c, "index");
                _cleanup_free_ char *model = xml_prop(c, "model");
                bool ok = index && model && parse_uint(index, 10, 255, &idx) == 0;
                *GROW(m->order, m->n_order) = (struct mark_record_ref) { MARK_CONTROLLER, m->n_controllers };
                *GROW(m->controllers, m->n_controllers) = (struct mark_controller) {
                        .index = ok ? (int) idx : -1, .model = TAKE_PTR(model),
                };
                return 0;
        }
        if (streq(name, "device"))
                return parse_device(c, controller, m, ret_error);
        if (streq(name, "managed"))
                return parse_managed(c, m, ret_error);
        if (streq(name, "clique"))
                return parse_clique(c, m, ret_error);
        return parse_removed_record(c, devices, controller, m, ret_error);
}

/* -E2BIG when m holds more records of a kind than a plan writes. */
static int check_counts(const struct mark *m, char **ret_error) {
        const struct {
                const char *name;
                size_t n, max;
        } kinds[] = {
                { "expander", m->n_expanders, MARK_CONTROLLER_RECORDS_MAX },
                { "controller", m->n_controllers, MARK_CONTROLLER_RECORDS_MAX },
                { "removed", m->n_removed, MARK_CONTROLLER_RECORDS_MAX },
                { "device", m->n_devices, MARK_DEVICE_RECORDS_MAX },
                { "managed", m->n_managed, MARK_DEVICE_RECORDS_MAX },
                { "clique", m->n_cliques, MARK_DEVICE_RECORDS_MAX },
        };
        for (size_t i = 0; i < ELEMENTSOF(kinds); i++)
                if (kinds[i].n > kinds[i].max)
                        return set_error(ret_error, -E2BIG,
                                         "pcinuma mark: more than %zu <pcinuma:%s> records, more than any plan writes (a guest "
                                         "has 256 PCI controller indexes, a port one slot of 8 functions): the mark is refused "
                                         "and nothing was changed", kinds[i].max, kinds[i].name);
        return 0;
}

int mark_parse(xmlNodePtr node, xmlNodePtr devices, struct mark *ret, char **ret_error) {
        _cleanup_(mark_done) struct mark m = {0};
        int r;
        for (xmlNodePtr c = node->children; c; c = c->next) {
                if (c->type != XML_ELEMENT_NODE)
                        continue;
                r = parse_record(c, devices, &m, ret_error);
                if (r < 0)
                        return r;
                /* As it goes: a forged mark stops at the limit. */
                r = check_counts(&m, ret_error);
                if (r < 0)
                        return r;
        }
        mark_parse_attrs(node, &m);
        r = check_attrs(&m, ret_error);
        if (r < 0)
                return r;
        r = check_values(&m, ret_error);
        if (r < 0)
                return r;
        *ret = m;
        m = (struct mark) {0};
        return 0;
}

/* --- matcher --------------------------------------------------------------- */

/* The mark's record of device hd, or NULL. */
static const struct mark_device *mark_device_of(const struct mark *m, const struct domain_hostdev *hd, char pci[PCI_ADDR_STRLEN]) {
        bool mdev = hd->kind == DOMAIN_HOSTDEV_MDEV;
        const char *want = mdev ? hd->mdev_uuid : pci_addr_format(&hd->host, pci);
        for (size_t i = 0; i < m->n_devices; i++) {
                const char *id = mdev ? m->devices[i].mdev : m->devices[i].host;
                if (id && want && strcasecmp(id, want) == 0)
                        return &m->devices[i];
        }
        return NULL;
}

/* The device set: every device the plan moves, in its cell, and nothing
 * else.  NULL when it agrees. */
static char *devices_mismatch(const struct mark *m, const struct plan *p, const struct domain *base) {
        size_t n_moved = 0;
        for (size_t i = 0; i < p->n_devices; i++) {
                const struct plan_device *pd = &p->devices[i];
                if (pd->action != PLAN_MOVE)
                        continue;
                n_moved++;
                char pci[PCI_ADDR_STRLEN];
                const struct mark_device *md = mark_device_of(m, &base->hostdevs[pd->hostdev], pci);
                if (!md)
                        return xasprintf("device set differs: the plan moves %s to guest cell %d, the mark does not list it",
                                         pd->name, pd->cell);
                if (md->guest_cell < 0 || md->guest_cell != pd->cell)
                        return xasprintf("device set differs: %s: guest cell %d in the mark, %d planned", pd->name,
                                         md->guest_cell, pd->cell);
        }
        if (m->n_devices != n_moved) {
                /* A device the mark moves and the plan does not. */
                for (size_t k = 0; k < m->n_devices; k++) {
                        const struct mark_device *md = &m->devices[k];
                        const char *id = md->host ? md->host : md->mdev;
                        bool planned = false;
                        for (size_t i = 0; i < p->n_devices && !planned && id; i++) {
                                const struct plan_device *pd = &p->devices[i];
                                const char *name = md->mdev && strncmp(pd->name, "mdev ", 5) == 0 ? pd->name + 5 : pd->name;
                                planned = pd->action == PLAN_MOVE && strcasecmp(name, id) == 0;
                        }
                        if (!planned)
                                return xasprintf("device set differs: the mark lists %s%s, the plan does not move it",
                                                 md->mdev ? "mdev " : "", id ? id : "a device without a name");
                }
                return xasprintf("device set differs: %zu devices in the mark, %zu planned", m->n_devices, n_moved);
        }
        if (m->n_expanders != p->n_pxbs)
                return xasprintf("expander buses: %zu in the mark, %zu planned", m->n_expanders, p->n_pxbs);
        return NULL;
}

/* gpudirect_clique: the same GPUs with the same ids, in order. */
static char *cliques_mismatch(const struct mark *m, const struct plan *p) {
        for (size_t i = 0; i < p->n_cliques; i++) {
                const char *gpu = p->devices[p->cliques[i].device].name;
                const struct mark_clique *mc = NULL;
                for (size_t k = 0; k < m->n_cliques && !mc; k++)
                        if (m->cliques[k].host && strcasecmp(m->cliques[k].host, gpu) == 0)
                                mc = &m->cliques[k];
                if (!mc)
                        return xasprintf("GPUDirect clique of %s: none in the mark, %u planned", gpu, p->cliques[i].id);
                if (mc->id != (int) p->cliques[i].id)
                        return xasprintf("GPUDirect clique of %s: %d in the mark, %u planned", gpu, mc->id, p->cliques[i].id);
        }
        for (size_t k = 0; k < m->n_cliques; k++) {
                bool planned = false;
                for (size_t i = 0; i < p->n_cliques && !planned; i++)
                        planned = m->cliques[k].host && strcasecmp(m->cliques[k].host, p->devices[p->cliques[i].device].name) == 0;
                if (!planned)
                        return xasprintf("GPUDirect clique of %s: %d in the mark, none planned",
                                         m->cliques[k].host ? m->cliques[k].host : "?", m->cliques[k].id);
        }
        /* The same records, but not one each in the plan's order. */
        if (m->n_cliques != p->n_cliques)
                return xasprintf("GPUDirect cliques: %zu records in the mark, %zu planned", m->n_cliques, p->n_cliques);
        for (size_t i = 0; i < p->n_cliques; i++)
                if (strcasecmp(m->cliques[i].host, p->devices[p->cliques[i].device].name) != 0)
                        return xstrdup("GPUDirect cliques: the mark lists the GPUs in another order than the plan");
        return NULL;
}

static const char *yes_no(bool b) {
        return b ? "yes" : "no";
}


char *mark_fingerprint_version_differs(const struct mark *m) {
        if (!m->fingerprint)
                return NULL;
        uint64_t v = 1;
        if (m->fingerprint_version && parse_uint(m->fingerprint_version, 10, INT32_MAX, &v) == 0 &&
            v == FINGERPRINT_VERSION)
                return NULL;
        return xasprintf("planned with topology fingerprint version %llu%s, this pcinuma uses %d",
                         (unsigned long long) v, m->fingerprint_version ? "" : " (the mark does not say)",
                         FINGERPRINT_VERSION);
}

/* A device removed from the domain since, or one that now goes elsewhere,
 * means the topology must be planned afresh.  The first difference found,
 * in that order: devices, migration, NCCL file, cliques, other switches. */
char *mark_mismatch(const struct mark *m, const struct plan *p, const struct domain *base, const struct domain *cur) {
        char *why = devices_mismatch(m, p, base);
        if (why)
                return why;
        /* The positions' format: a mark with migration data planned by
         * another fingerprint version holds positions this pcinuma does
         * not compute (the driver kinds of version 2), so its destinations
         * would refuse it; plan it again.  A mark without the attribute
         * predates it: version 1. */
        char *old_version = mark_fingerprint_version_differs(m);
        if (old_version)
                return old_version;
        /* migration: the mark says what the policy answers now (a mark
         * from before, or from the other setting, is planned again). */
        _cleanup_free_ char *not_migratable = NULL;
        bool migratable = mark_migratable(p, base, &not_migratable);
        if (!m->migratable || !streq(m->migratable, yes_no(migratable))) {
                const char *said = m->migratable ? m->migratable : "nothing (an earlier pcinuma)";
                if (!p->settings.migration_same_topology)
                        return xasprintf("migratable: mark says %s, policy migration=refuse", said);
                if (!migratable)
                        return xasprintf("migratable: mark says %s, the plan says no: %s", said, not_migratable);
                return xasprintf("migratable: mark says %s, policy migration=same-topology", said);
        }
        /* The NCCL topology file: given or not, and the same text. */
        if (!!p->nccl_arg != !!m->nccl_topology_sha256)
                return xasprintf("NCCL topology file: %s", p->nccl_arg ? "planned, not in the mark" : "in the mark, not planned");
        if (p->nccl_arg) {
                char hex[SHA256_HEX_SIZE];
                sha256_hex(p->nccl_arg, strlen(p->nccl_arg), hex);
                if (!streq(m->nccl_topology_sha256, hex))
                        return xasprintf("NCCL topology file differs (sha256 %.16s..., planned %.16s...)", m->nccl_topology_sha256, hex);
        }
        why = cliques_mismatch(m, p);
        if (why)
                return why;
        /* The other feature switches' marks. */
        if (!!m->distances != p->add_distances)
                return xasprintf("host distances: %s", p->add_distances ? "planned, not in the mark" : "in the mark, not planned");
        size_t n_switch_ports = 0;
        for (size_t i = 0; i < p->n_ports; i++)
                n_switch_ports += p->ports[i].device < 0;
        if (m->n_controllers != n_switch_ports)
                return xasprintf("guest switch ports: %zu in the mark, %zu planned", m->n_controllers, n_switch_ports);
        if (m->n_managed != p->n_managed)
                return xasprintf("managed='no' hostdevs: %zu in the mark, %zu planned", m->n_managed, p->n_managed);
        if (p->pcihole64_kib && cur->pcihole64_kib != p->pcihole64_kib)
                return xasprintf("pcihole64: %llu KiB in the domain, %llu KiB planned", (unsigned long long) cur->pcihole64_kib,
                                 (unsigned long long) p->pcihole64_kib);
        if (!p->pcihole64_kib && (m->pcie_root_created || m->pcihole64_original))
                return xstrdup("pcihole64: set by the mark, not planned");
        return NULL;
}

bool mark_matches(const struct mark *m, const struct plan *p, const struct domain *base, const struct domain *cur) {
        _cleanup_free_ char *why = mark_mismatch(m, p, base, cur);
        return !why;
}

