/* placeholder: being written */
typedef int pcinuma_placeholder_hostmap_c;
