/* Fuzz target: the policy file (policy_parse()), and rule matching
 * (policy_resolve()) for a set of domains, among them ones named after the
 * parsed rules' own patterns so that rules do match. */
#include "fuzz.h"

#include "policy.h"

static const struct policy_subject fixed_subjects[] = {
        { NULL, NULL, NULL, NULL },
        { "gpu-train-01", "4dea22b3-1d52-d8f3-2516-782e98ab3fa0", "training", NULL },
        { "web", "4DEA22B3-1D52-D8F3-2516-782E98AB3FA0", "best-effort", "require" },
        { "", "", "", "" },
        { "[a-", "not-a-uuid", "*", "required" },
        { "vm\\*", NULL, NULL, "Legacy" },
        { NULL, NULL, NULL, "off" },
};

static void check_resolve(const struct policy *p, const struct policy_subject *s) {
        struct policy_settings set = { .mode = _POLICY_MODE_MAX };
        _cleanup_free_ char *origin = NULL;

        policy_resolve(p, s, &set, &origin);
        if ((unsigned) set.mode >= _POLICY_MODE_MAX)
                fuzz_fail("policy_resolve() gave mode %d", (int) set.mode);
        if (!origin)
                fuzz_fail("policy_resolve() gave no origin");
        if (!policy_mode_to_string(set.mode))
                fuzz_fail("mode %d has no name", (int) set.mode);
        /* Without a origin pointer too. */
        struct policy_settings again;
        policy_resolve(p, s, &again, NULL);
        if (again.mode != set.mode)
                fuzz_fail("policy_resolve() is not deterministic");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_policy_ struct policy *p = NULL;
        _cleanup_free_ char *err = NULL;

        if (size > 256 * 1024)
                return 0;

        int r = policy_parse((const char *) data, size, "fuzz.json", &p, &err);
        if (r < 0) {
                if (!err)
                        fuzz_fail("policy_parse() failed (%d) without a message", r);
                if (p)
                        fuzz_fail("policy_parse() failed but set *ret");
                return 0;
        }
        if (!p)
                fuzz_fail("policy_parse() succeeded without a policy");
        if ((unsigned) p->def.mode >= _POLICY_MODE_MAX)
                fuzz_fail("default mode %d", (int) p->def.mode);

        for (size_t i = 0; i < ELEMENTSOF(fixed_subjects); i++)
                check_resolve(p, &fixed_subjects[i]);

        for (size_t i = 0; i < p->n_rules && i < 16; i++) {
                const struct policy_rule *rule = &p->rules[i];
                if (!rule->name_glob && !rule->uuid && !rule->tag)
                        fuzz_fail("rule %zu matches on nothing", i);
                if ((unsigned) rule->settings.mode >= _POLICY_MODE_MAX)
                        fuzz_fail("rule %zu has mode %d", i, (int) rule->settings.mode);
                struct policy_subject s = {
                        .name = rule->name_glob,
                        .uuid = rule->uuid,
                        .tag = rule->tag,
                        .requested = policy_mode_to_string(rule->settings.mode),
                };
                check_resolve(p, &s);
                s.requested = rule->tag;
                check_resolve(p, &s);
        }

        /* The built-in default, for comparison with a parse of "{}". */
        _cleanup_policy_ struct policy *def = policy_new_default();
        check_resolve(def, &fixed_subjects[1]);
        return 0;
}
