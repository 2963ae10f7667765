/* The namespaces of pcinuma's metadata in a libvirt domain XML: the mark
 * (<pcinuma:topology>, lib/core/mark.h) and the policy request
 * (<pcinuma:policy>).  Spelled once, here, for the core that parses them and
 * for the hook and the watcher, which only look for them by string search
 * and link neither libxml2 nor the core. */
#pragma once

/* What every pcinuma namespace begins with: the hook's fast path looks for
 * this to know a domain carries pcinuma metadata of either kind. */
#define PCINUMA_URN_PREFIX "urn:pcinuma:"

/* The mark a plan leaves in <metadata> (docs/design.md §7). */
#define PCINUMA_TOPOLOGY_NS PCINUMA_URN_PREFIX "topology:1"

/* A domain's request for a policy: <pcinuma:policy name= tag=>. */
#define PCINUMA_POLICY_NS PCINUMA_URN_PREFIX "policy:1"
