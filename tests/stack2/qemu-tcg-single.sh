#!/bin/sh
# The emulator the guest suite's domains use on the second stack
# (tests/stack2/inside.sh passes it as test_guest.py --emulator): QEMU
# with single-threaded TCG.  It runs /usr/bin/qemu-system-x86_64 with the
# same arguments, but for one: the value 'tcg' of an '-accel' option
# becomes 'tcg,thread=single'.  Nothing else changes.
#
# Why: QEMU 10.0.2 (bookworm-backports) with multi-threaded TCG, the
# default for an x86 guest with several vCPUs, aborts at random while
# Linux assigns the PCI BARs: "iotlb_to_section: Assertion
# `section_index < d->map.sections_nb' failed" (system/physmem.c): the
# guest suite's case (a) 7 boots in 30, none in 35 with single-threaded
# TCG (docs/install.md, "Tested versions", has the likely cause).  Domain XML
# cannot say so: libvirt writes '-accel tcg' itself and QEMU keeps the
# first -accel that works, libvirt 11's <features><tcg> has only
# tb-cache, and '-global tcg-accel.thread=single' does not reach the
# accelerator.
#
# libvirt probes this emulator's capabilities too: the probe's arguments
# pass through the same way.
prev=""
for arg do
    shift
    if [ "$prev" = "-accel" ] && [ "$arg" = "tcg" ]; then
        arg="tcg,thread=single"
    fi
    set -- "$@" "$arg"
    prev=$arg
done
exec /usr/bin/qemu-system-x86_64 "$@"
