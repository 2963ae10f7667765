/* placeholder: being written */
typedef int pcinuma_placeholder_domain_c;
