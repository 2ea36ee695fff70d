"""The first code of every sandbox run: it loads the run's syscall filter, then runs the run's
program (`/tmp/main.py`) as `__main__`.

    python -I boot.py LIBC LIBSECCOMP     (the sandbox's command line)

It runs in the sandbox's interpreter (isolated: none of the service's packages), as the run's
uid, after the namespaces, limits and uid change are in place; the sandbox copies it and
pyseccomp (a thin ctypes binding of the system's libseccomp, which compiles the filter to BPF)
into a folder of the run the run cannot write. A loaded filter cannot be removed and is
inherited by every process the run starts. What it denies (EPERM, so Python raises
PermissionError) is kernel surface no program here needs and escapes have used: new namespaces
(unshare, setns, clone with a CLONE_NEW* flag), mounts, io_uring, keyrings (keyctl, add_key,
request_key: the service's session keyring is out of reach), bpf, ptrace and other processes'
memory, perf events, userfaultfd, kernel modules and kexec, and netlink sockets (a
NETLINK_KOBJECT_UEVENT socket received the host's kernel device events; the run's network
namespace has no interface to ask netlink about, and the C library's resolver carries on
without it). clone3 answers ENOSYS: its flags sit in memory a filter cannot read, and the C
library then falls back to clone.
"""

import errno
import os
import runpy
import sys
import types

DENIED = (
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "move_mount",
    "open_tree",
    "mount_setattr",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "perf_event_open",
    "userfaultfd",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "open_by_handle_at",
)
CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWTIME": 0x00000080,
}
AF_NETLINK = 16


def load_filter(libraries: dict[str, str]) -> None:
    """`libraries`: the C library's and libseccomp's file names, as the service found them."""
    import ctypes

    # pyseccomp finds both with ctypes.util.find_library, which runs ldconfig (and importing
    # ctypes.util imports subprocess and shutil): a stand-in for the import saves most of the
    # boot's time, and goes once the filter is loaded
    stand_in = types.ModuleType("ctypes.util")
    stand_in.find_library = libraries.get  # type: ignore[attr-defined]
    sys.modules["ctypes.util"] = ctypes.util = stand_in  # type: ignore[attr-defined]
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        f.add_rule(sc.ERRNO(errno.EPERM), name)
    for flag in CLONE_NEW.values():
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.EPERM), "socket", sc.Arg(0, sc.EQ, AF_NETLINK))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    f.load()
    del sys.modules["ctypes.util"], ctypes.util, sys.modules["pyseccomp"]  # type: ignore[attr-defined]  # the run imports its own


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    load_filter(dict(zip(("c", "seccomp"), sys.argv[1:3])))
    del sys.path[0]
    sys.argv = ["/tmp/main.py"]
    runpy.run_path("/tmp/main.py", run_name="__main__")
