/* placeholder: being written */
typedef int pcinuma_placeholder_ctl_host_c;
