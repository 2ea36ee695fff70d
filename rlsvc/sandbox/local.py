"""A local sandbox for model-written Python: one fresh process tree per run, on this node.

What confines a run (Linux; util-linux's prlimit, unshare and setpriv):
- resource limits (prlimit): address space, CPU seconds, file size (which also caps stdout and
  stderr: they go to files), open files, processes;
- a cgroup of its own (rlsvc/sandbox/cgroup.py, when the service runs as root and cgroups are
  writable): memory, processes and CPU share of the whole run, all its processes together, and
  at the end every process left in it killed;
- namespaces (unshare): no network (a new network namespace whose only interface is down); its
  own PID namespace, so when the run ends every process it started dies with it, background
  children and daemons included; its own mount namespace with a root built for it (`_INSIDE`):
  the system's /usr read-only, package folders covered, /tmp a size-limited tmpfs of the run's
  own (`SandboxLimits.disk_mb`) holding its program, small empty tmpfs for /dev/shm, /run, /var
  and /home, nothing else of the host; /proc shows only the run's processes. Every byte it can
  write is in memory, charged to its cgroup, and gone with its mount namespace: no host disk;
- a user of its own (setpriv, when the service runs as root; leased node-wide, `UidPool`): a
  uid with no files, so it can write nowhere but its folder, read no private file of the
  service, and its process limit is its own (root ignores RLIMIT_NPROC);
- a clean environment: none of the service's variables (API keys) reach the code;
- a wall-clock timeout, after which the whole tree is killed;
- a syscall filter, loaded by the run's first code (rlsvc/sandbox/boot.py).
Without root, a user namespace stands in for the separate uid: the code then runs as the service's
user, so files that user can write outside the folder are not protected.
"""

from __future__ import annotations

import ctypes.util
import fcntl
import logging
import os
import random
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyseccomp

from rlsvc.sandbox import cgroup
from rlsvc.sandbox.text import valid_utf8

log = logging.getLogger(__name__)
# The run's first code (boot.py: loads its syscall filter, then runs main.py) and what it needs
BOOT_DIR = ".rlsvc-boot"
BOOT_FILES = (Path(__file__).with_name("boot.py"), Path(pyseccomp.__file__))
OUTPUT_LIMIT = 64 * 1024  # characters of stdout/stderr returned (the file-size limit caps what is written)
UID_BASE, UID_POOL = 200_000, 50_000  # uids with no files and no passwd entry

# Runs inside the new namespaces, as root there, before the code: builds the run's root on an
# empty tmpfs and enters it. Read-only: the system's /usr (interpreter, standard library, tools;
# its site-packages covered by empty read-only mounts, since that is where the service and its
# hidden tests are installed in an image), the dynamic linker's cache, four device nodes.
# Writable and size-limited, all tmpfs: /tmp (the run's program copied in, owned by the run's
# uid), /dev/shm, /run, /var, /home. A tmpfs bounds the bytes written in total, `fallocate`
# reservations included (a per-file size limit does not: 128 files within it took 1 GB of host
# disk), and its pages are charged to the memory cgroup of the process that writes them: the
# run's. Nothing else of the host: not the project, not the service's files, not a host unix socket.
# Arguments: the run's folder (its program), the empty folder the root is built on, the site
# folders to cover (":"-separated), /tmp's size in MB, the uid that owns /tmp, then the command.
_INSIDE = r"""
set -e
R="$2"
TMP_INODES=16384
mount -t tmpfs -o size=1m,mode=755 rlsvc-root "$R"
mkdir "$R/usr" "$R/etc" "$R/proc" "$R/dev" "$R/tmp" "$R/run" "$R/var" "$R/home"
mount --rbind /usr "$R/usr"
mount -o remount,bind,ro "$R/usr"
for d in bin sbin lib lib64 lib32 libx32; do
  if [ -L "/$d" ]; then ln -s "$(readlink "/$d")" "$R/$d";
  elif [ -d "/$d" ]; then mkdir "$R/$d"; mount --rbind "/$d" "$R/$d"; mount -o remount,bind,ro "$R/$d"; fi
done
IFS=:
for d in $3; do
  if [ -d "$R$d" ]; then mount -t tmpfs -o ro,size=4k,mode=755 rlsvc-hidden "$R$d"; fi
done
unset IFS
touch "$R/etc/ld.so.cache"
mount --bind /etc/ld.so.cache "$R/etc/ld.so.cache"
mount -o remount,bind,ro "$R/etc/ld.so.cache"
for n in null zero random urandom; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
ln -s /proc/self/fd "$R/dev/fd"
mkdir "$R/dev/shm"
mount -t tmpfs -o size=16m,mode=1777 tmpfs "$R/dev/shm"
for d in run var home; do mount -t tmpfs -o size=1m,mode=1777 tmpfs "$R/$d"; done
mount -t tmpfs -o "size=$4m,nr_inodes=$TMP_INODES,mode=700,uid=$5,gid=$5" rlsvc-tmp "$R/tmp"
cp -a "$1/." "$R/tmp/"
mount -t proc proc "$R/proc"
shift 5
exec "$(PATH="/usr/sbin:/sbin:$PATH" command -v chroot)" "$R" /bin/sh -c 'cd /tmp && exec "$@"' rlsvc-sandbox "$@"
"""


def _exited_within(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for exit without polling: Popen.wait(timeout) sleeps in steps of up to 50 ms, which
    was a third of a short run's latency; a pidfd wakes the moment the process exits."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel): fall back to the polling wait
        try:
            proc.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


class UidPool:
    """Run uids leased node-wide, so two runs never share a uid, whichever processes of the node
    start them (env actors each run their own sandbox). Uid `base + i` is leased while a process
    holds a POSIX lock on byte number `base + i` of one lock file (created by the service's user, 0600, in its
    temporary folder); the kernel releases the lock when the holder exits, so a crashed actor
    leaks nothing. POSIX locks belong to a process, not a thread: the uids leased by this
    process's threads are also kept in a set. The search starts at a random index, so a uid is
    seldom reused soon after its run."""

    _held: set[int] = set()
    _guard = threading.Lock()
    _files: dict[Path, int] = {}  # one descriptor per lock file and process: closing any would drop every lock on it

    def __init__(self, lock_file: Path | None = None, base: int = UID_BASE, size: int = UID_POOL) -> None:
        self.lock_file = lock_file or Path(tempfile.gettempdir()) / "rlsvc-sandbox-uids.lock"
        self.base, self.size = base, size

    def _fd(self) -> int:
        if self.lock_file not in self._files:
            self._files[self.lock_file] = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        return self._files[self.lock_file]

    @contextmanager
    def lease(self) -> Iterator[int]:
        with self._guard:
            fd, start = self._fd(), random.randrange(self.size)
            for k in range(self.size):
                i = (start + k) % self.size
                if self.base + i in self._held:
                    continue
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, self.base + i)
                except OSError:  # another process's run holds it
                    continue
                self._held.add(self.base + i)
                break
            else:
                raise SandboxUnavailable(f"all {self.size} sandbox uids are in use on this node")
        try:
            yield self.base + i
        finally:
            with self._guard:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, self.base + i)
                self._held.discard(self.base + i)


def remove_tree(path: Path) -> None:
    """Remove a run's folder whatever the run left in it, without raising. shutil.rmtree recurses
    once per level, so a tree deeper than the interpreter's recursion limit makes it raise
    RecursionError (which `ignore_errors` does not cover); GNU rm walks the tree iteratively,
    with paths of any length. Folders the run made unreadable are opened up first (as root
    permissions do not stop the removal; without root they would)."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        pass
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "timeout": 300, "check": False}
    try:
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], **quiet)  # type: ignore[call-overload]
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], **quiet)  # type: ignore[call-overload]
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("could not remove the sandbox folder %s: %s", path, e)
        return
    if os.path.lexists(path):
        log.warning("could not remove the sandbox folder %s", path)


class SandboxUnavailable(RuntimeError):
    """This machine cannot confine code as LocalSandbox requires (the reason is the message)."""


@dataclass(frozen=True)
class SandboxLimits:
    memory_mb: int = 512
    """Address-space limit of every process of the run."""
    cpu_s: int = 10
    """CPU seconds per process (the wall-clock timeout bounds the whole run)."""
    file_mb: int = 8
    """Largest file the run may write, stdout and stderr included."""
    disk_mb: int = 64
    """Size of the run's /tmp, a tmpfs (16,384 files at most) whose pages count against the run's
    memory. The run's writable space in total: this, 16 MB of /dev/shm and 1 MB each of /run,
    /var and /home (`_INSIDE`); nothing on the host's disk."""
    open_files: int = 64
    """Open file descriptors per process."""
    processes: int = 32
    """Processes (and threads) the run's uid may have at once; also the run's cgroup's pids.max."""
    run_memory_mb: int = 512
    """Memory of the whole run, all its processes and the files it writes in memory together
    (its cgroup's memory limit), where per-run cgroups are available."""
    cpus: float = 1.0
    """CPU time of the whole run per wall-clock second (its cgroup's CPU quota: 1.0 is one core)."""


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None
    """The process's exit status; negative: killed by that signal; None: it never started."""
    timed_out: bool
    error: str | None
    """Why the run failed, in one line: the exception's `Type: message` from the traceback, the
    limit hit, or the timeout; None when it exited 0."""
    elapsed_s: float = 0.0
    extra: dict = field(default_factory=dict)
    replaced: int = 0
    """Characters of stdout, stderr and error that were not valid UTF-8 (lone surrogates) and
    were replaced with U+FFFD here, so the result always encodes (rlsvc/sandbox/text.py)."""

    def __post_init__(self) -> None:
        self.stdout, a = valid_utf8(self.stdout)
        self.stderr, b = valid_utf8(self.stderr)
        self.error, c = valid_utf8(self.error) if self.error is not None else (None, 0)
        self.replaced += a + b + c

    def to_dict(self) -> dict:
        return asdict(self)


def _sandbox_python() -> str:
    """An interpreter every uid can run (a venv under /root is not one)."""
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK) and os.stat(candidate).st_mode & 0o001:
            return candidate
    return shutil.which("python3") or "python3"


def _site_dirs(python: str) -> list[str]:
    """Where `python` finds installed packages (covered in the run's root: the service's own
    package and its hidden tests may be installed there)."""
    code = "import site, sys; print(*site.getsitepackages(), *(p for p in sys.path if p.endswith(('site-packages', 'dist-packages'))), sep='\\n')"
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    return sorted({p for p in out.stdout.splitlines() if p.startswith("/usr/") and ":" not in p})


def signal_name(number: int) -> str:
    """`SIGSEGV`, `SIGRTMIN+3`, or `signal 99`: a name for any signal number, never an error."""
    try:
        return signal.Signals(number).name
    except ValueError:
        pass
    if signal.SIGRTMIN < number < signal.SIGRTMAX:
        return f"SIGRTMIN+{number - signal.SIGRTMIN}"
    return f"signal {number}"


def _error_line(
    stderr: str, exit_code: int | None, timed_out: bool, timeout_s: float, limits: SandboxLimits, out_of_memory: bool = False
) -> str | None:
    if timed_out:
        return f"TimeoutError: no result within {timeout_s:g} s (wall clock)"
    if exit_code == 0:
        return None
    if out_of_memory and exit_code == -signal.SIGKILL:
        return f"Killed: memory limit of the run ({limits.run_memory_mb} MB, all its processes together)"
    if exit_code is not None and exit_code < 0:
        sig = signal_name(-exit_code)
        reason = {
            "SIGXCPU": f"CPU limit of {limits.cpu_s} s",
            "SIGXFSZ": f"file-size limit of {limits.file_mb} MB",
            "SIGKILL": "killed (memory or process limit, or the sandbox)",
            "SIGSEGV": "segmentation fault",
        }.get(sig, sig)
        return f"Killed: {reason}"
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    for line in reversed(lines):  # a traceback ends with "Type: message"
        if not line.startswith((" ", "\t", "Traceback")):
            return line.strip()[:500]
    return f"exit status {exit_code}"


def _source_bytes(code: str) -> bytes:
    """The program's file. Bytes that were not UTF-8 (read with surrogateescape, as the CLI
    reads stdin) go back as they were; other surrogates as their code points' bytes: either way
    the run reports the SyntaxError, and writing the file never fails."""
    try:
        return code.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return code.encode("utf-8", "surrogatepass")


class LocalSandbox:
    """Run Python code under the limits above; each `run` is independent (no state survives)."""

    def __init__(self, limits: SandboxLimits | None = None, python: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.python = python or _sandbox_python()
        self.as_root = os.geteuid() == 0
        self.site_dirs = _site_dirs(self.python)
        self.libraries = [ctypes.util.find_library("c") or "libc.so.6", ctypes.util.find_library("seccomp") or "libseccomp.so.2"]
        self.uids = UidPool()
        # a cgroup per run needs root (or a delegated cgroup subtree); without it, per-process limits only
        self.no_cgroups = cgroup.available() if self.as_root else "the service does not run as root"
        if self.no_cgroups:
            log.warning("LocalSandbox: no per-run cgroups (%s): limits are per process", self.no_cgroups)
        missing = [tool for tool in ("prlimit", "unshare", "setpriv") if shutil.which(tool) is None]
        if missing:
            raise SandboxUnavailable(f"LocalSandbox needs util-linux's {', '.join(missing)} on PATH")
        # Confinement that cannot be set up (a container without CAP_SYS_ADMIN and with user
        # namespaces blocked) would otherwise make every run look like the code's own error.
        probe = self.run("print('ok')", timeout_s=30)
        if probe.stdout != "ok\n":
            why = (probe.stderr.strip().splitlines() or [probe.error or "no output"])[-1]
            raise SandboxUnavailable(f"LocalSandbox cannot confine code on this node: {why}")

    def _command(self, folder: Path, root: Path, uid: int, cgroup_procs: list[str]) -> list[str]:
        lim = self.limits
        limits = [
            f"--as={lim.memory_mb * 2**20}",
            f"--cpu={lim.cpu_s}",
            f"--fsize={lim.file_mb * 2**20}",
            f"--nofile={lim.open_files}",
            f"--nproc={lim.processes}",
            "--core=0",
        ]
        ns = ["--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
        if not self.as_root:
            ns = ["--user", "--map-root-user", *ns]
        # The kernel clears the parent-death signal that unshare's --kill-child set when setpriv
        # changes the uid; without setting it again, a run whose PID 1 leaves the process group
        # (setsid) outlives the kill on timeout. With it, the run's PID 1 dies with unshare.
        drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--pdeathsig=SIGKILL"]
        drop = drop if self.as_root else []
        code = [*drop, self.python, "-I", "-B", "-X", "utf8", f"/tmp/{BOOT_DIR}/boot.py", *self.libraries]
        hidden = ":".join(self.site_dirs)
        owner = str(uid if self.as_root else 0)  # without root, the service's user is root in its user namespace
        inside = [str(folder), str(root), hidden, str(lim.disk_mb), owner]
        cmd = ["prlimit", *limits, "--", "unshare", *ns, "sh", "-c", _INSIDE, "rlsvc-sandbox", *inside, *code]
        # the run's first process joins its cgroup before it starts anything, then becomes the run
        join = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
        return ["sh", "-c", join, "rlsvc-cgroup", str(len(cgroup_procs)), *cgroup_procs, *cmd]

    def run(self, code: str, timeout_s: float = 5.0) -> SandboxResult:
        if not self.as_root:  # the run is the service's user inside a user namespace: no uid to lease
            return self._run(code, timeout_s, os.geteuid())
        with self.uids.lease() as uid:
            return self._run(code, timeout_s, uid)

    def _run(self, code: str, timeout_s: float, uid: int) -> SandboxResult:
        folder = Path(tempfile.mkdtemp(prefix="rlsvc-sbx-"))
        io_dir = Path(tempfile.mkdtemp(prefix="rlsvc-sbx-io-"))  # outside the run's reach
        root = Path(tempfile.mkdtemp(prefix="rlsvc-sbx-root-"))  # empty: the run's root is mounted on it in its namespace
        out, err = io_dir / "stdout", io_dir / "stderr"
        run_cgroup = None
        try:
            if not self.no_cgroups:
                limits = self.limits
                run_cgroup = cgroup.RunCgroup(cgroup.RunLimits(limits.run_memory_mb * 2**20, limits.processes, limits.cpus))
            (folder / "main.py").write_bytes(_source_bytes(code))
            boot = folder / BOOT_DIR  # the service's (root's, under root): the run reads it and cannot change it
            boot.mkdir()
            for source in BOOT_FILES:
                shutil.copyfile(source, boot / source.name)
            if self.as_root:
                os.chown(folder, uid, uid)
                os.chown(folder / "main.py", uid, uid)
            folder.chmod(0o700)
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": "/tmp",
                "TMPDIR": "/tmp",
                "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1",
            }
            timed_out = False
            t0 = time.perf_counter()
            with out.open("wb") as fo, err.open("wb") as fe:
                proc = subprocess.Popen(
                    self._command(folder, root, uid, run_cgroup.procs_files if run_cgroup else []),
                    stdin=subprocess.DEVNULL,
                    stdout=fo,
                    stderr=fe,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                )
                if not _exited_within(proc, timeout_s):
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGKILL)  # unshare dies; --kill-child takes the namespace down
                exit_code = proc.wait()
            elapsed = time.perf_counter() - t0
            stdout = out.read_bytes()[:OUTPUT_LIMIT].decode("utf-8", "replace")
            stderr = err.read_bytes()[:OUTPUT_LIMIT].decode("utf-8", "replace")
            # A signal that killed the run comes back negative: every process between here and
            # the code execs the next, and unshare re-raises its child's signal on itself. So a
            # status above 128 is the code's own (os._exit(163)), never a signal's 128+n.
            if exit_code == 1 and stderr.endswith(_UNSHARE_SIGKILLED):
                # unshare re-raises the signal that killed the run on itself, which it cannot do
                # for SIGKILL (the memory limit of the run's cgroup, for one): it says so and exits 1
                stderr, exit_code = stderr.removesuffix(_UNSHARE_SIGKILLED), -signal.SIGKILL
            oom = run_cgroup is not None and run_cgroup.out_of_memory()
            error = _error_line(stderr, exit_code, timed_out, timeout_s, self.limits, oom)
            return SandboxResult(stdout, stderr, exit_code, timed_out, error, elapsed)
        finally:
            if run_cgroup is not None:
                run_cgroup.remove()  # whatever is left of the run is killed first
            remove_tree(folder)
            remove_tree(io_dir)
            remove_tree(root)


_UNSHARE_SIGKILLED = "unshare: sigprocmask unblock failed: Invalid argument\n"
ERROR_MARK = "<<rlsvc-cell-error>>"
CELL_RAISED = 86
"""The exit status of a session run whose cell raised. The harness reports the exception by
exiting with it: code cannot redirect an exit status, as it can redirect standard error (a
cell that pointed fd 2 at /dev/null switched the error penalty off for every later cell)."""


def session_program(previous: list[str], code: str) -> str:
    """A program that replays a session's earlier cells (their output discarded) and then runs
    `code`. An exception in `code` ends the run with status CELL_RAISED, after its traceback is
    written after ERROR_MARK to the harness's own copy of standard error (taken before any cell
    ran, so a cell that redirects fd 2 or sys.stderr does not divert it; one that closes it loses
    only the message)."""
    return f"""
import contextlib, io, os, sys, traceback
_report, _exit = os.dup(2), os._exit
_g = {{"__name__": "__main__"}}
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    for _cell in {previous!r}:
        try:
            exec(compile(_cell, "<cell>", "exec"), _g)
        except BaseException:
            pass
try:
    exec(compile({code!r}, "<cell>", "exec"), _g)
except BaseException:
    try:
        sys.stdout.flush()
        os.write(_report, ({ERROR_MARK!r} + "\\n" + traceback.format_exc()).encode("utf-8", "backslashreplace"))
    except BaseException:
        pass
    _exit({CELL_RAISED})
"""


class LocalSession:
    """An interpreter session over LocalSandbox: variables, imports and definitions of earlier
    cells carry over, because each run replays the cells that ran cleanly before it (in a fresh,
    confined process tree, so a crash or a hang loses nothing but that run). Replaying repeats a
    cell's side effects, and its cost grows with the session's length: episodes are a few turns."""

    def __init__(self, box: LocalSandbox, timeout_s: float = 5.0) -> None:
        self.box, self.timeout_s = box, timeout_s
        self.cells: list[str] = []

    def execute(self, code: str) -> SandboxResult:
        result = self.box.run(session_program(self.cells, code), self.timeout_s)
        if result.exit_code == CELL_RAISED and not result.timed_out:
            # the last mark is the harness's: it writes it as the run's last act
            stderr, marked, trace = result.stderr.rpartition(ERROR_MARK + "\n")
            lines = [ln for ln in trace.strip().splitlines() if ln.strip()]
            error = lines[-1].strip()[:500] if marked and lines else "Error: the cell raised (its error report was closed)"
            stderr = stderr + trace if marked else result.stderr
            return SandboxResult(result.stdout, stderr, 1, False, error, result.elapsed_s, replaced=result.replaced)
        if result.exit_code == 0:
            self.cells.append(code)
        return result

    def close(self) -> None:
        self.cells.clear()
