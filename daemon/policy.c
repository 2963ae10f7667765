/* placeholder: being written */
typedef int pcinuma_placeholder_policy_c;
