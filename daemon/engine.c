/* placeholder: being written */
typedef int pcinuma_placeholder_engine_c;
