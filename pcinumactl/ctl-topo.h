/* pcinumactl topo. */
#pragma once

int ctl_topo(int argc, char **argv);
