/* Unit tests for the policy file parser and policy_resolve(). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/stat.h>

#include "policy.h"
#include "policy-file.h"

#define SRC "test.json"

static struct policy *parse_ok(const char *json) {
        struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;
        int r = policy_parse(json, strlen(json), SRC, &p, &err);

        if (r < 0)
                fail_msg("unexpected parse error %d: %s", r, strna(err));
        assert_null(err);
        assert_non_null(p);
        return p;
}

/* Parse text that must be rejected; returns the message, and checks that
 * nothing leaked into *ret. */
static char *parse_err(const char *json) {
        struct policy *p = NULL;
        char *err = NULL;
        int r = policy_parse(json, strlen(json), SRC, &p, &err);

        assert_int_equal(r, -EINVAL);
        assert_null(p);
        assert_non_null(err);
        return err;
}

static void assert_parse_error(const char *json, const char *expected) {
        _cleanup_free_ char *err = parse_err(json);
        assert_string_equal(err, expected);
}

static void test_mode_strings(void **state) {
        enum policy_mode m;

        (void) state;
        assert_string_equal(policy_mode_to_string(POLICY_OFF), "off");
        assert_string_equal(policy_mode_to_string(POLICY_LEGACY), "legacy");
        assert_string_equal(policy_mode_to_string(POLICY_PREFERRED), "preferred");
        assert_string_equal(policy_mode_to_string(POLICY_SOCKET), "socket");
        assert_string_equal(policy_mode_to_string(POLICY_REQUIRE), "require");
        assert_null(policy_mode_to_string(_POLICY_MODE_MAX));

        for (int i = 0; i < _POLICY_MODE_MAX; i++) {
                assert_int_equal(policy_mode_from_string(policy_mode_to_string(i), &m), 0);
                assert_int_equal(m, i);
        }
        assert_int_equal(policy_mode_from_string("required", &m), 0);
        assert_int_equal(m, POLICY_REQUIRE);
        assert_int_equal(policy_mode_from_string("Require", &m), -EINVAL);
        assert_int_equal(policy_mode_from_string("", &m), -EINVAL);
        assert_int_equal(policy_mode_from_string(NULL, &m), -EINVAL);
}

static void test_new_default(void **state) {
        _cleanup_policy_ struct policy *p = policy_new_default();

        (void) state;
        /* Do no harm on install: the built-in default never refuses. */
        assert_int_equal(p->def.mode, POLICY_PREFERRED);
        assert_true(p->def.mmio64_auto);
        assert_false(p->def.migration_same_topology);
        assert_false(p->allow_domain_policy);
        assert_int_equal(p->n_rules, 0);
        assert_null(p->rules);
        assert_int_equal(p->hook_timeout_ms, 10000);
        assert_int_equal(p->hook_on_unreachable, POLICY_UNREACHABLE_ALLOW);
}

static void test_minimal(void **state) {
        _cleanup_policy_ struct policy *p = parse_ok("{\"default\": {\"policy\": \"require\"}}");

        (void) state;
        assert_int_equal(p->def.mode, POLICY_REQUIRE);
        assert_false(p->allow_domain_policy);
        assert_int_equal(p->n_rules, 0);
        assert_int_equal(p->hook_timeout_ms, 10000);
        assert_int_equal(p->hook_on_unreachable, POLICY_UNREACHABLE_ALLOW);
}

static void test_empty_object(void **state) {
        _cleanup_policy_ struct policy *p = parse_ok(" {}\n");

        (void) state;
        assert_int_equal(p->def.mode, POLICY_PREFERRED);
        assert_int_equal(p->n_rules, 0);

        _cleanup_policy_ struct policy *q = parse_ok("{\"default\": {}, \"rules\": [], \"hook\": {}}");
        assert_int_equal(q->def.mode, POLICY_PREFERRED);
        assert_int_equal(q->n_rules, 0);
        assert_int_equal(q->hook_timeout_ms, 10000);
}

static const char full_policy[] =
        "{\n"
        "  \"default\": {\"policy\": \"preferred\"},\n"
        "  \"allow_domain_policy\": true,\n"
        "  \"rules\": [\n"
        "    {\"match\": {\"name\": \"gpu-*\"}, \"policy\": \"require\"},\n"
        "    {\"match\": {\"name\": \"ib-*\", \"tag\": \"training\"}, \"policy\": \"socket\"},\n"
        "    {\"match\": {\"uuid\": \"4DEA22B3-1D52-D8F3-2516-782E98AB3FA0\"}, \"policy\": \"off\"},\n"
        "    {\"match\": {\"tag\": \"training\"}, \"policy\": \"legacy\"}\n"
        "  ],\n"
        "  \"hook\": {\"timeout_ms\": 2500, \"on_unreachable\": \"refuse\"}\n"
        "}\n";

static void test_full(void **state) {
        _cleanup_policy_ struct policy *p = parse_ok(full_policy);

        (void) state;
        assert_int_equal(p->def.mode, POLICY_PREFERRED);
        assert_true(p->allow_domain_policy);
        assert_int_equal(p->hook_timeout_ms, 2500);
        assert_int_equal(p->hook_on_unreachable, POLICY_UNREACHABLE_REFUSE);
        assert_int_equal(p->n_rules, 4);

        assert_string_equal(p->rules[0].name_glob, "gpu-*");
        assert_null(p->rules[0].uuid);
        assert_null(p->rules[0].tag);
        assert_int_equal(p->rules[0].settings.mode, POLICY_REQUIRE);

        assert_string_equal(p->rules[1].name_glob, "ib-*");
        assert_string_equal(p->rules[1].tag, "training");
        assert_int_equal(p->rules[1].settings.mode, POLICY_SOCKET);

        assert_null(p->rules[2].name_glob);
        assert_string_equal(p->rules[2].uuid, "4DEA22B3-1D52-D8F3-2516-782E98AB3FA0");
        assert_int_equal(p->rules[2].settings.mode, POLICY_OFF);

        assert_string_equal(p->rules[3].tag, "training");
        assert_int_equal(p->rules[3].settings.mode, POLICY_LEGACY);
}

static void test_alias_required(void **state) {
        _cleanup_policy_ struct policy *p = parse_ok(
                "{\"default\": {\"policy\": \"required\"},"
                " \"rules\": [{\"match\": {\"tag\": \"x\"}, \"policy\": \"required\"}]}");

        (void) state;
        assert_int_equal(p->def.mode, POLICY_REQUIRE);
        assert_int_equal(p->rules[0].settings.mode, POLICY_REQUIRE);
}

static void test_timeout_range(void **state) {
        (void) state;

        _cleanup_policy_ struct policy *lo = parse_ok("{\"hook\": {\"timeout_ms\": 1}}");
        assert_int_equal(lo->hook_timeout_ms, 1);
        _cleanup_policy_ struct policy *hi = parse_ok("{\"hook\": {\"timeout_ms\": 600000}}");
        assert_int_equal(hi->hook_timeout_ms, 600000);

        assert_parse_error("{\"hook\": {\"timeout_ms\": 0}}",
                           SRC ": hook.timeout_ms: 0 is out of range (expected 1..600000)");
        assert_parse_error("{\"hook\": {\"timeout_ms\": 600001}}",
                           SRC ": hook.timeout_ms: 600001 is out of range (expected 1..600000)");
        assert_parse_error("{\"hook\": {\"timeout_ms\": -5}}",
                           SRC ": hook.timeout_ms: -5 is out of range (expected 1..600000)");
        /* Beyond int64: must not wrap around into the valid range. */
        _cleanup_free_ char *e = parse_err("{\"hook\": {\"timeout_ms\": 18446744073709551617}}");
        assert_non_null(strstr(e, SRC ": hook.timeout_ms: "));
        assert_non_null(strstr(e, "is out of range (expected 1..600000)"));
        assert_parse_error("{\"hook\": {\"timeout_ms\": \"10000\"}}",
                           SRC ": hook.timeout_ms: expected an integer, got string");
        assert_parse_error("{\"hook\": {\"timeout_ms\": 1.5}}",
                           SRC ": hook.timeout_ms: expected an integer, got number");
        assert_parse_error("{\"hook\": {\"timeout_ms\": null}}",
                           SRC ": hook.timeout_ms: expected an integer, got null");
}

static void test_feature_switches(void **state) {
        (void) state;
        /* Defaults: the paths topology with its switches, distances,
         * mmio64 and the I/O check on, the rest off. */
        _cleanup_policy_ struct policy *d = parse_ok("{}");
        assert_int_equal(d->def.topology, POLICY_TOPOLOGY_PATHS);
        assert_true(d->def.mirror_switches);
        assert_true(d->def.mirror_distances);
        assert_true(d->def.mmio64_auto);
        assert_true(d->def.io_port_check);
        assert_false(d->def.managed_auto);

        /* A rule starts from the default's switches and overrides its own. */
        _cleanup_policy_ struct policy *off = parse_ok("{\"default\": {\"mmio64\": \"off\"}}");
        assert_false(off->def.mmio64_auto);
        _cleanup_policy_ struct policy *p = parse_ok(
                "{\"default\": {\"policy\": \"legacy\", \"mirror_switches\": true, \"mmio64\": \"auto\"},"
                " \"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": \"require\","
                " \"mirror_distances\": false, \"io_port_check\": false, \"managed\": \"auto\"}],"
                " \"vfio_variant_drivers\": [\"acme_vfio\", \"other\"]}");
        assert_true(p->def.mirror_switches);
        assert_true(p->def.mmio64_auto);
        assert_true(p->def.mirror_distances);
        const struct policy_settings *r = &p->rules[0].settings;
        assert_int_equal(r->mode, POLICY_REQUIRE);
        assert_true(r->mirror_switches);          /* inherited */
        assert_true(r->mmio64_auto);              /* inherited */
        assert_false(r->mirror_distances);        /* overridden */
        assert_false(r->io_port_check);
        assert_true(r->managed_auto);
        assert_int_equal(p->n_variant_drivers, 2);
        assert_string_equal(p->variant_drivers[1], "other");

        struct policy_settings got;
        struct policy_subject subj = { .name = "gpu-1" };
        policy_resolve(p, &subj, &got, NULL);
        assert_false(got.mirror_distances);
        subj.name = "web-1";
        policy_resolve(p, &subj, &got, NULL);
        assert_true(got.mirror_distances);

        /* "topology": "cells" turns mirror_switches off unless the same
         * object sets it; a rule inherits both and may change them. */
        _cleanup_policy_ struct policy *t = parse_ok(
                "{\"default\": {\"topology\": \"cells\"},"
                " \"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"require\"},"
                "             {\"match\": {\"name\": \"b\"}, \"policy\": \"require\", \"topology\": \"paths\"},"
                "             {\"match\": {\"name\": \"c\"}, \"policy\": \"require\", \"topology\": \"cells\", \"mirror_switches\": true}]}");
        assert_int_equal(t->def.topology, POLICY_TOPOLOGY_CELLS);
        assert_false(t->def.mirror_switches);
        assert_int_equal(t->rules[0].settings.topology, POLICY_TOPOLOGY_CELLS);
        assert_false(t->rules[0].settings.mirror_switches);
        assert_int_equal(t->rules[1].settings.topology, POLICY_TOPOLOGY_PATHS);
        assert_true(t->rules[1].settings.mirror_switches);
        assert_int_equal(t->rules[2].settings.topology, POLICY_TOPOLOGY_CELLS);
        assert_true(t->rules[2].settings.mirror_switches);
        assert_string_equal(policy_topology_to_string(POLICY_TOPOLOGY_CELLS), "cells");
        assert_parse_error("{\"default\": {\"topology\": \"nodes\"}}",
                           SRC ": default.topology: expected \"paths\" or \"cells\", not 'nodes'");
        assert_parse_error("{\"default\": {\"topology\": 1}}",
                           SRC ": default.topology: expected a string, got integer");

        assert_parse_error("{\"default\": {\"mirror_switches\": \"yes\"}}",
                           SRC ": default.mirror_switches: expected a boolean, got string");
        assert_parse_error("{\"default\": {\"mmio64\": \"on\"}}",
                           SRC ": default.mmio64: expected \"auto\" or \"off\", not 'on'");
        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"off\", \"managed\": true}]}",
                           SRC ": rules[0].managed: expected a string, got boolean");
        /* "migration": refuse by default; same-topology is the opt-in,
         * in the default or a rule. */
        assert_false(d->def.migration_same_topology);
        _cleanup_policy_ struct policy *mg = parse_ok(
                "{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"require\", \"migration\": \"same-topology\"}]}");
        assert_false(mg->def.migration_same_topology);
        assert_true(mg->rules[0].settings.migration_same_topology);
        _cleanup_policy_ struct policy *mg2 = parse_ok("{\"default\": {\"migration\": \"same-topology\"}}");
        assert_true(mg2->def.migration_same_topology);
        _cleanup_policy_ struct policy *mg3 = parse_ok("{\"default\": {\"migration\": \"refuse\"}}");
        assert_false(mg3->def.migration_same_topology);
        assert_parse_error("{\"default\": {\"migration\": \"never\"}}",
                           SRC ": default.migration: expected \"same-topology\" or \"refuse\", not 'never'");
        assert_parse_error("{\"vfio_variant_drivers\": [\"\"]}",
                           SRC ": vfio_variant_drivers[0]: expected a non-empty string");
        /* json-c would keep the last of two equal keys: refused instead. */
        _cleanup_free_ char *dup = parse_err("{\"default\": {\"policy\": \"require\"},\n \"default\": {\"policy\": \"off\"}}");
        assert_non_null(strstr(dup, "line 2, column 2: JSON syntax error: duplicate key 'default'"));
        _cleanup_policy_ struct policy *nested = parse_ok("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"off\"},"
                                                          " {\"match\": {\"name\": \"b\"}, \"policy\": \"off\"}]}");
        assert_int_equal(nested->n_rules, 2);   /* equal keys in different objects are fine */
}

/* gpudirect_clique: "auto" or "off", off by default, inherited by a rule
 * from the default and overridden by its own. */
static void test_gpudirect_clique(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *d = parse_ok("{}");
        assert_false(d->def.gpudirect_clique_auto);
        assert_false(policy_settings_default(POLICY_REQUIRE).gpudirect_clique_auto);

        _cleanup_policy_ struct policy *p = parse_ok(
                "{\"default\": {\"policy\": \"legacy\", \"gpudirect_clique\": \"auto\"},"
                " \"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"require\"},"
                "             {\"match\": {\"name\": \"b\"}, \"policy\": \"require\", \"gpudirect_clique\": \"off\"}]}");
        assert_true(p->def.gpudirect_clique_auto);
        assert_true(p->rules[0].settings.gpudirect_clique_auto);    /* inherited */
        assert_false(p->rules[1].settings.gpudirect_clique_auto);   /* overridden */

        assert_parse_error("{\"default\": {\"gpudirect_clique\": true}}",
                           SRC ": default.gpudirect_clique: expected a string, got boolean");
        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"off\", \"gpudirect_clique\": \"on\"}]}",
                           SRC ": rules[0].gpudirect_clique: expected \"auto\" or \"off\", not 'on'");
}

/* first_start: "restart" (the default, every mode), "refuse" or "allow";
 * transient: "leave" (default) or "restart"; both inherited by a rule from
 * the default and overridden by its own.  restart_window_ms: top level,
 * 5000 by default, 100..600000. */
static void test_restart_switches(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *d = parse_ok("{}");
        assert_int_equal(d->def.first_start, POLICY_FIRST_START_RESTART);
        assert_false(d->def.transient_restart);
        assert_int_equal(d->restart_window_ms, 5000);
        for (int m = 0; m < _POLICY_MODE_MAX; m++) {
                assert_int_equal(policy_settings_default((enum policy_mode) m).first_start, POLICY_FIRST_START_RESTART);
                assert_false(policy_settings_default((enum policy_mode) m).transient_restart);
        }
        assert_string_equal(policy_first_start_to_string(POLICY_FIRST_START_RESTART), "restart");
        assert_string_equal(policy_first_start_to_string(POLICY_FIRST_START_REFUSE), "refuse");
        assert_string_equal(policy_first_start_to_string(POLICY_FIRST_START_ALLOW), "allow");

        _cleanup_policy_ struct policy *p = parse_ok(
                "{\"default\": {\"policy\": \"require\", \"first_start\": \"refuse\", \"transient\": \"restart\"},"
                " \"restart_window_ms\": 250,"
                " \"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"legacy\"},"
                "             {\"match\": {\"name\": \"b\"}, \"policy\": \"require\", \"first_start\": \"allow\","
                "              \"transient\": \"leave\"},"
                "             {\"match\": {\"name\": \"c\"}, \"policy\": \"require\", \"first_start\": \"restart\"}]}");
        assert_int_equal(p->restart_window_ms, 250);
        assert_int_equal(p->def.first_start, POLICY_FIRST_START_REFUSE);
        assert_true(p->def.transient_restart);
        assert_int_equal(p->rules[0].settings.first_start, POLICY_FIRST_START_REFUSE);  /* inherited */
        assert_true(p->rules[0].settings.transient_restart);
        assert_int_equal(p->rules[1].settings.first_start, POLICY_FIRST_START_ALLOW);   /* overridden */
        assert_false(p->rules[1].settings.transient_restart);
        assert_int_equal(p->rules[2].settings.first_start, POLICY_FIRST_START_RESTART);
        struct policy_settings got;
        policy_resolve(p, &(struct policy_subject) { .name = "b" }, &got, NULL);
        assert_int_equal(got.first_start, POLICY_FIRST_START_ALLOW);

        assert_parse_error("{\"default\": {\"first_start\": true}}",
                           SRC ": default.first_start: expected a string, got boolean");
        assert_parse_error("{\"default\": {\"first_start\": \"retry\"}}",
                           SRC ": default.first_start: expected \"restart\", \"refuse\" or \"allow\", not 'retry'");
        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"off\", \"transient\": \"keep\"}]}",
                           SRC ": rules[0].transient: expected \"restart\" or \"leave\", not 'keep'");
        assert_parse_error("{\"default\": {\"transient\": null}}",
                           SRC ": default.transient: expected a string, got null");
        assert_parse_error("{\"restart_window_ms\": 99}",
                           SRC ": restart_window_ms: 99 is out of range (expected 100..600000)");
        assert_parse_error("{\"restart_window_ms\": 600001}",
                           SRC ": restart_window_ms: 600001 is out of range (expected 100..600000)");
        assert_parse_error("{\"restart_window_ms\": \"5s\"}",
                           SRC ": restart_window_ms: expected an integer, got string");
        /* Per rule, the window is not a switch. */
        assert_parse_error("{\"default\": {\"restart_window_ms\": 1000}}",
                           SRC ": default: unknown key 'restart_window_ms'");
}

/* Keys are compared after their escapes are decoded, as json-c decodes
 * them: "d\u0065fault" is a second "default", and would otherwise win. */
static void test_duplicate_keys_decoded(void **state) {
        (void) state;
        _cleanup_free_ char *e1 = parse_err("{\"default\": {\"policy\": \"require\"},\n \"d\\u0065fault\": {\"policy\": \"off\"}}");
        assert_non_null(strstr(e1, "line 2, column 2: JSON syntax error: duplicate key 'd\\u0065fault' in one object: "
                                   "the same key as 'default' once escapes are decoded"));
        /* Escaped in the first one, in a nested object, a surrogate pair
         * against the raw UTF-8 of the same character, and "\/". */
        _cleanup_free_ char *e2 = parse_err("{\"\\u0064efault\": {\"policy\": \"off\"}, \"default\": {\"policy\": \"require\"}}");
        assert_non_null(strstr(e2, "duplicate key 'default' in one object: the same key as '\\u0064efault'"));
        _cleanup_free_ char *e3 = parse_err("{\"rules\": [{\"match\": {\"name\": \"a\", \"n\\u0061me\": \"b\"}, \"policy\": \"off\"}]}");
        assert_non_null(strstr(e3, "duplicate key 'n\\u0061me'"));
        _cleanup_free_ char *e4 = parse_err("{\"default\": {\"policy\": \"off\"}, \"x\\ud83d\\ude00\": 1, \"x\xf0\x9f\x98\x80\": 2}");
        assert_non_null(strstr(e4, "duplicate key 'x\xf0\x9f\x98\x80'"));
        _cleanup_free_ char *e5 = parse_err("{\"a\\/b\": 1, \"a/b\": 2}");
        assert_non_null(strstr(e5, "duplicate key 'a/b'"));
        /* Escapes that decode to different keys are not duplicates (the
         * unknown key is the error then). */
        _cleanup_free_ char *e6 = parse_err("{\"default\": {\"policy\": \"off\"}, \"d\\u0066fault\": 1}");
        assert_null(strstr(e6, "duplicate"));
        assert_non_null(strstr(e6, "dffault"));
        /* An escaped key that is not repeated is just that key. */
        _cleanup_policy_ struct policy *ok = parse_ok("{\"d\\u0065fault\": {\"policy\": \"require\"}}");
        assert_int_equal(ok->def.mode, POLICY_REQUIRE);
        assert_parse_error("{\"vfio_variant_drivers\": \"x\"}",
                           SRC ": vfio_variant_drivers: expected an array, got string");
}

static void test_errors_keys(void **state) {
        (void) state;

        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"polcy\": \"require\"}]}",
                           SRC ": rules[0]: unknown key 'polcy'");
        assert_parse_error("{\"defaults\": {\"policy\": \"require\"}}",
                           SRC ": top level: unknown key 'defaults'");
        assert_parse_error("{\"default\": {\"policy\": \"require\", \"mode\": 1}}",
                           SRC ": default: unknown key 'mode'");
        assert_parse_error("{\"hook\": {\"timeout\": 5}}",
                           SRC ": hook: unknown key 'timeout'");
        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"off\"},"
                           " {\"match\": {\"nmae\": \"b\"}, \"policy\": \"off\"}]}",
                           SRC ": rules[1].match: unknown key 'nmae'");
}

static void test_errors_policy_names(void **state) {
        (void) state;

        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"off\"},"
                           " {\"match\": {\"name\": \"b\"}, \"policy\": \"strict\"}]}",
                           SRC ": rules[1].policy: unknown policy 'strict' "
                           "(expected off, legacy, preferred, socket, require)");
        assert_parse_error("{\"default\": {\"policy\": \"Legacy\"}}",
                           SRC ": default.policy: unknown policy 'Legacy' "
                           "(expected off, legacy, preferred, socket, require)");
        assert_parse_error("{\"default\": {\"policy\": 3}}",
                           SRC ": default.policy: expected a string, got integer");
        assert_parse_error("{\"hook\": {\"on_unreachable\": \"deny\"}}",
                           SRC ": hook.on_unreachable: unknown value 'deny' (expected allow, refuse)");
}

static void test_errors_types(void **state) {
        (void) state;

        assert_parse_error("[]", SRC ": top level: expected an object, got array");
        assert_parse_error("\"policy\"", SRC ": top level: expected an object, got string");
        assert_parse_error("42", SRC ": top level: expected an object, got integer");
        assert_parse_error("null", SRC ": top level: expected an object, got null");
        assert_parse_error("{\"default\": \"require\"}",
                           SRC ": default: expected an object, got string");
        assert_parse_error("{\"allow_domain_policy\": \"yes\"}",
                           SRC ": allow_domain_policy: expected a boolean, got string");
        assert_parse_error("{\"allow_domain_policy\": 1}",
                           SRC ": allow_domain_policy: expected a boolean, got integer");
        assert_parse_error("{\"rules\": {}}", SRC ": rules: expected an array, got object");
        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}, \"policy\": \"off\"}, \"gpu-*\"]}",
                           SRC ": rules[1]: expected an object, got string");
        assert_parse_error("{\"hook\": []}", SRC ": hook: expected an object, got array");
        assert_parse_error("{\"hook\": {\"on_unreachable\": false}}",
                           SRC ": hook.on_unreachable: expected a string, got boolean");
}

static void test_errors_rules(void **state) {
        (void) state;

        assert_parse_error("{\"rules\": [{\"policy\": \"off\"}]}",
                           SRC ": rules[0]: missing key 'match'");
        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"a\"}}]}",
                           SRC ": rules[0]: missing key 'policy'");
        assert_parse_error("{\"rules\": [{\"match\": {}, \"policy\": \"off\"}]}",
                           SRC ": rules[0].match: expected at least one of name, uuid, tag");
        assert_parse_error("{\"rules\": [{\"match\": \"gpu-*\", \"policy\": \"off\"}]}",
                           SRC ": rules[0].match: expected an object, got string");
        assert_parse_error("{\"rules\": [{\"match\": {\"name\": \"\"}, \"policy\": \"off\"}]}",
                           SRC ": rules[0].match.name: expected a non-empty string");
        assert_parse_error("{\"rules\": [{\"match\": {\"tag\": 7}, \"policy\": \"off\"}]}",
                           SRC ": rules[0].match.tag: expected a string, got integer");
        assert_parse_error("{\"rules\": [{\"match\": {\"uuid\": \"4dea22b3\"}, \"policy\": \"off\"}]}",
                           SRC ": rules[0].match.uuid: '4dea22b3' is not a UUID "
                           "(expected the form 01234567-89ab-cdef-0123-456789abcdef)");
        assert_parse_error("{\"rules\": [{\"match\": {\"tag\": \"a\\u0000b\"}, \"policy\": \"off\"}]}",
                           SRC ": rules[0].match.tag: string contains a NUL character");
}

static void test_errors_syntax(void **state) {
        (void) state;

        assert_parse_error("{\n"
                           "  \"default\": {\"policy\": \"legacy\"},\n"
                           "  \"rules\": [ , ]\n"
                           "}\n",
                           SRC ": line 3, column 14: JSON syntax error: unexpected character");
        /* Trailing garbage after the object. */
        assert_parse_error("{\"default\": {\"policy\": \"legacy\"}}\n}\n",
                           SRC ": line 2, column 1: JSON syntax error: unexpected character");
        assert_parse_error("{} {}", SRC ": line 1, column 4: JSON syntax error: unexpected character");
        /* Not JSON: comments and trailing commas. */
        assert_parse_error("{\"default\": {\"policy\": \"legacy\"},}",
                           SRC ": line 1, column 34: JSON syntax error: unexpected character");
        assert_parse_error("{\n  // hi\n}", SRC ": line 2, column 3: JSON syntax error: quoted object property name expected");
        /* Cut short. */
        assert_parse_error("{\"default\": {\"policy\": \"legacy\"}\n",
                           SRC ": line 2, column 1: JSON syntax error: unexpected end of data");
        /* Columns count characters, not bytes. */
        assert_parse_error("{\"rules\": [{\"match\": {\"tag\": \"\xc3\xa9t\xc3\xa9\"}, \"policy\" \"off\"}]}",
                           SRC ": line 1, column 47: JSON syntax error: object property name separator ':' expected");
        assert_parse_error("", SRC ": empty file, expected a JSON object");
        assert_parse_error(" \n\t\n", SRC ": empty file, expected a JSON object");
}

static void test_nul_byte_and_bom(void **state) {
        struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;
        static const char with_nul[] = "{}\0garbage";

        (void) state;
        assert_int_equal(policy_parse(with_nul, sizeof(with_nul) - 1, SRC, &p, &err), -EINVAL);
        assert_null(p);
        assert_string_equal(err, SRC ": line 1, column 3: JSON syntax error: NUL byte");

        _cleanup_policy_ struct policy *q = parse_ok("\xef\xbb\xbf{\"default\": {\"policy\": \"off\"}}");
        assert_int_equal(q->def.mode, POLICY_OFF);
}

static void test_parse_does_not_need_nul_terminator(void **state) {
        /* The buffer is cut before a trailing "x": with a correct length
         * it is valid. */
        static const char text[] = "{\"default\": {\"policy\": \"socket\"}}x";
        _cleanup_policy_ struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;

        (void) state;
        assert_int_equal(policy_parse(text, sizeof(text) - 2, SRC, &p, &err), 0);
        assert_int_equal(p->def.mode, POLICY_SOCKET);
}

static void assert_resolves(const struct policy *p, const struct policy_subject *s,
                            enum policy_mode mode, const char *origin) {
        struct policy_settings st;
        _cleanup_free_ char *o = NULL;

        policy_resolve(p, s, &st, &o);
        assert_string_equal(o, origin);
        assert_int_equal(st.mode, mode);
}

static void test_resolve_order(void **state) {
        _cleanup_policy_ struct policy *p = parse_ok(full_policy);

        (void) state;

        /* Nothing matches: the default. */
        assert_resolves(p, &(struct policy_subject) { .name = "web-1" }, POLICY_PREFERRED, "default");
        assert_resolves(p, &(struct policy_subject) { 0 }, POLICY_PREFERRED, "default");
        assert_resolves(p, NULL, POLICY_PREFERRED, "default");

        /* Glob. */
        assert_resolves(p, &(struct policy_subject) { .name = "gpu-7" }, POLICY_REQUIRE, "rule 1 (name 'gpu-*')");
        assert_resolves(p, &(struct policy_subject) { .name = "my-gpu-7" }, POLICY_PREFERRED, "default");

        /* First match wins: gpu-7 with tag training also matches rule 4. */
        assert_resolves(p, &(struct policy_subject) { .name = "gpu-7", .tag = "training" },
                        POLICY_REQUIRE, "rule 1 (name 'gpu-*')");

        /* AND of fields: rule 2 needs both name and tag; without the name,
         * the tag alone falls through to rule 4. */
        assert_resolves(p, &(struct policy_subject) { .name = "ib-1", .tag = "training" },
                        POLICY_SOCKET, "rule 2 (name 'ib-*', tag 'training')");
        assert_resolves(p, &(struct policy_subject) { .name = "ib-1" }, POLICY_PREFERRED, "default");
        assert_resolves(p, &(struct policy_subject) { .name = "ib-1", .tag = "Training" },
                        POLICY_PREFERRED, "default");
        assert_resolves(p, &(struct policy_subject) { .name = "web", .tag = "training" },
                        POLICY_LEGACY, "rule 4 (tag 'training')");
        assert_resolves(p, &(struct policy_subject) { .tag = "training" }, POLICY_LEGACY, "rule 4 (tag 'training')");

        /* UUID, case-insensitive. */
        assert_resolves(p, &(struct policy_subject) { .name = "x", .uuid = "4dea22b3-1d52-d8f3-2516-782e98ab3fa0" },
                        POLICY_OFF, "rule 3 (uuid '4DEA22B3-1D52-D8F3-2516-782E98AB3FA0')");
        assert_resolves(p, &(struct policy_subject) { .name = "x", .uuid = "4dea22b3-1d52-d8f3-2516-782e98ab3fa1" },
                        POLICY_PREFERRED, "default");
}

static void test_resolve_all_fields(void **state) {
        _cleanup_policy_ struct policy *p = parse_ok(
                "{\"rules\": [{\"match\": {\"name\": \"vm?\", \"uuid\": \"00000000-0000-0000-0000-00000000000a\","
                " \"tag\": \"t\"}, \"policy\": \"socket\"}]}");

        (void) state;
        assert_resolves(p, &(struct policy_subject) { .name = "vm1", .uuid = "00000000-0000-0000-0000-00000000000A", .tag = "t" },
                        POLICY_SOCKET, "rule 1 (name 'vm?', uuid '00000000-0000-0000-0000-00000000000a', tag 't')");
        assert_resolves(p, &(struct policy_subject) { .name = "vm12", .uuid = "00000000-0000-0000-0000-00000000000a", .tag = "t" },
                        POLICY_PREFERRED, "default");
        assert_resolves(p, &(struct policy_subject) { .name = "vm1", .tag = "t" }, POLICY_PREFERRED, "default");
}

static void test_resolve_domain_request(void **state) {
        _cleanup_policy_ struct policy *allowed = parse_ok(full_policy);
        _cleanup_policy_ struct policy *denied = parse_ok(
                "{\"rules\": [{\"match\": {\"name\": \"gpu-*\"}, \"policy\": \"require\"}]}");

        (void) state;

        /* Allowed: the domain's choice wins over the matching rule. */
        assert_resolves(allowed, &(struct policy_subject) { .name = "gpu-1", .requested = "off" },
                        POLICY_OFF, "domain metadata (allowed by allow_domain_policy)");
        assert_resolves(allowed, &(struct policy_subject) { .name = "web", .requested = "required" },
                        POLICY_REQUIRE, "domain metadata (allowed by allow_domain_policy)");
        assert_resolves(allowed, &(struct policy_subject) { .name = "gpu-1", .requested = "bogus" },
                        POLICY_REQUIRE, "rule 1 (name 'gpu-*'); domain asked for 'bogus', not a policy, ignored");

        /* Not allowed. */
        assert_resolves(denied, &(struct policy_subject) { .name = "gpu-1", .requested = "off" },
                        POLICY_REQUIRE, "rule 1 (name 'gpu-*'); domain asked for 'off', ignored: allow_domain_policy is false");
        assert_resolves(denied, &(struct policy_subject) { .name = "web", .requested = "socket" },
                        POLICY_PREFERRED, "default; domain asked for 'socket', ignored: allow_domain_policy is false");

        /* ret_origin is optional. */
        struct policy_settings st;
        policy_resolve(allowed, &(struct policy_subject) { .name = "gpu-1", .requested = "socket" }, &st, NULL);
        assert_int_equal(st.mode, POLICY_SOCKET);
}

static char *tmpdir;

static int setup_tmpdir(void **state) {
        char t[] = "/tmp/test-policy-XXXXXX";

        (void) state;
        if (!mkdtemp(t))
                return -1;
        tmpdir = xstrdup(t);
        return 0;
}

static int teardown_tmpdir(void **state) {
        (void) state;
        static const char *const files[] = { "ok.json", "bad.json", "limit.json", "over.json" };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                _cleanup_free_ char *f = xasprintf("%s/%s", tmpdir, files[i]);
                (void) unlink(f);
        }
        (void) rmdir(tmpdir);
        free(tmpdir);
        tmpdir = NULL;
        return 0;
}

static char *write_file(const char *name, const char *data, size_t len) {
        char *path = xasprintf("%s/%s", tmpdir, name);
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        assert_true(fd >= 0);
        assert_int_equal(write(fd, data, len), (ssize_t) len);
        return path;
}

static void test_load_file(void **state) {
        _cleanup_free_ char *path = write_file("ok.json", full_policy, strlen(full_policy));
        _cleanup_policy_ struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;

        (void) state;
        assert_int_equal(policy_load_file(path, &p, &err), 0);
        assert_null(err);
        assert_int_equal(p->n_rules, 4);
        assert_int_equal(p->hook_timeout_ms, 2500);
}

static void test_load_file_errors_name_path(void **state) {
        _cleanup_free_ char *bad = write_file("bad.json", "{\"rules\": 1}", 12);
        _cleanup_free_ char *missing = xasprintf("%s/missing.json", tmpdir);
        _cleanup_free_ char *expected = NULL;
        struct policy *p = NULL;
        char *err = NULL;

        (void) state;
        assert_int_equal(policy_load_file(missing, &p, &err), -ENOENT);
        assert_null(p);
        expected = xasprintf("%s: cannot read: %s", missing, strerror(ENOENT));
        assert_string_equal(err, expected);
        free(err);
        err = NULL;

        assert_int_equal(policy_load_file(tmpdir, &p, &err), -EISDIR);
        free(expected);
        expected = xasprintf("%s: cannot read: %s", tmpdir, strerror(EISDIR));
        assert_string_equal(err, expected);
        free(err);
        err = NULL;

        /* Parse errors name the file, too. */
        assert_int_equal(policy_load_file(bad, &p, &err), -EINVAL);
        free(expected);
        expected = xasprintf("%s: rules: expected an array, got integer", bad);
        assert_string_equal(err, expected);
        free(err);
}

static void test_load_file_size_limit(void **state) {
        const size_t limit = 1024 * 1024;
        _cleanup_free_ char *buf = xmalloc(limit + 1);
        _cleanup_policy_ struct policy *p = NULL;
        char *err = NULL;

        (void) state;

        /* Exactly 1 MiB: the object padded with white space is fine. */
        memset(buf, ' ', limit + 1);
        static const char obj[] = "{\"default\": {\"policy\": \"socket\"}}";
        memcpy(buf, obj, strlen(obj));
        _cleanup_free_ char *at_limit = write_file("limit.json", buf, limit);
        assert_int_equal(policy_load_file(at_limit, &p, &err), 0);
        assert_int_equal(p->def.mode, POLICY_SOCKET);
        p = policy_free(p);

        /* One byte more is refused, and the message names the file. */
        _cleanup_free_ char *over = write_file("over.json", buf, limit + 1);
        assert_int_equal(policy_load_file(over, &p, &err), -EFBIG);
        assert_null(p);
        _cleanup_free_ char *expected = xasprintf("%s: file too large (over 1048576 bytes)", over);
        assert_string_equal(err, expected);
        free(err);
}

/* "passthrough_pool" (issue 24): BDFs, classes (a prefix of 2, 4 or 6
 * hex digits) and vendor:device pairs, each matching what it names and
 * nothing else; anything else refused naming the entry. */
static void test_passthrough_pool(void **state) {
        (void) state;
        _cleanup_policy_ struct policy *none = parse_ok("{}");
        assert_int_equal(none->n_pool, 0);
        struct pci_addr a = { .domain = 0, .bus = 0x3b, .slot = 0, .func = 0 }, b = { .bus = 0x3c };
        assert_null(policy_pool_find(none, &a, 0x030200, 0x10de, 0x2330));
        assert_null(policy_pool_find(NULL, &a, 0x030200, 0x10de, 0x2330));

        _cleanup_policy_ struct policy *p = parse_ok(
                "{\"passthrough_pool\": [\"0000:3b:00.0\", \"class:0x0108\", \"class:0x12\", \"class:0x020700\", \"10de:2330\"]}");
        assert_int_equal(p->n_pool, 5);
        assert_string_equal(p->pool[1].text, "class:0x0108");
        assert_string_equal(policy_pool_find(p, &a, 0x088000, 0x8086, 0x0b00)->text, "0000:3b:00.0");
        assert_null(policy_pool_find(p, &b, 0x088000, 0x8086, 0x0b00));
        assert_string_equal(policy_pool_find(p, &b, 0x010802, 0x144d, 0xa80a)->text, "class:0x0108");
        assert_null(policy_pool_find(p, &b, 0x010601, 0x144d, 0xa80a));
        assert_string_equal(policy_pool_find(p, &b, 0x120000, 0x1, 0x2)->text, "class:0x12");
        assert_string_equal(policy_pool_find(p, &b, 0x020700, 0x15b3, 0x1021)->text, "class:0x020700");
        assert_null(policy_pool_find(p, &b, 0x020000, 0x15b3, 0x1017));
        assert_string_equal(policy_pool_find(p, &b, 0x030200, 0x10de, 0x2330)->text, "10de:2330");
        assert_null(policy_pool_find(p, &b, 0x030200, 0x10de, 0x2331));

        assert_parse_error("{\"passthrough_pool\": \"10de:2330\"}", SRC ": passthrough_pool: expected an array, got string");
        assert_parse_error("{\"passthrough_pool\": [\"\"]}", SRC ": passthrough_pool[0]: expected a non-empty string");
        static const char *const bad[] = { "nvidia", "class:0x1", "class:0x01080", "class:0x0108021", "class:0xzz",
                                           "10de:233", "10de:23300", "0000:3b:00.8", "gpu" };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *json = xasprintf("{\"passthrough_pool\": [\"10de:2330\", \"%s\"]}", bad[i]);
                _cleanup_free_ char *want = xasprintf(SRC ": passthrough_pool[1]: '%s' is not a PCI address (0000:3b:00.0), "
                                                      "a class (class:0x03, class:0x0302 or class:0x030200) or a "
                                                      "vendor:device pair (10de:2330)", bad[i]);
                assert_parse_error(json, want);
        }
}

int main(void) {
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_mode_strings),
                cmocka_unit_test(test_passthrough_pool),
                cmocka_unit_test(test_new_default),
                cmocka_unit_test(test_minimal),
                cmocka_unit_test(test_feature_switches),
                cmocka_unit_test(test_gpudirect_clique),
                cmocka_unit_test(test_restart_switches),
                cmocka_unit_test(test_empty_object),
                cmocka_unit_test(test_full),
                cmocka_unit_test(test_alias_required),
                cmocka_unit_test(test_timeout_range),
                cmocka_unit_test(test_duplicate_keys_decoded),
                cmocka_unit_test(test_errors_keys),
                cmocka_unit_test(test_errors_policy_names),
                cmocka_unit_test(test_errors_types),
                cmocka_unit_test(test_errors_rules),
                cmocka_unit_test(test_errors_syntax),
                cmocka_unit_test(test_nul_byte_and_bom),
                cmocka_unit_test(test_parse_does_not_need_nul_terminator),
                cmocka_unit_test(test_resolve_order),
                cmocka_unit_test(test_resolve_all_fields),
                cmocka_unit_test(test_resolve_domain_request),
                cmocka_unit_test(test_load_file),
                cmocka_unit_test(test_load_file_errors_name_path),
                cmocka_unit_test(test_load_file_size_limit),
        };
        return cmocka_run_group_tests(tests, setup_tmpdir, teardown_tmpdir);
}
