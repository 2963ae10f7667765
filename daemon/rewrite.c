/* placeholder: being written */
typedef int pcinuma_placeholder_rewrite_c;
