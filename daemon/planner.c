/* placeholder: being written */
typedef int pcinuma_placeholder_planner_c;
