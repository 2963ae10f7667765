/* Cleanup functions for json-c objects, for the modules that build or
 * parse JSON with json-c (the protocols, the policy reader, the tools).
 * Nothing here does I/O. */
#pragma once

#include <json.h>

#include "util.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(json_object *, json_object_put)
#define _cleanup_json_ _cleanup_(json_object_putp)

DEFINE_TRIVIAL_CLEANUP_FUNC(struct json_tokener *, json_tokener_free)
