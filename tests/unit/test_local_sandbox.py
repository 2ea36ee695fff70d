"""LocalSandbox against hostile snippets: each ends within its limits, leaves no process and no
file behind, sees no secret and no network, and the sandbox keeps serving afterwards."""

from __future__ import annotations

import ast
import errno
import json
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rlsvc.sandbox import LocalSandbox, LocalSession, SandboxLimits, SandboxResult
from rlsvc.sandbox.local import ERROR_MARK, UID_BASE, UID_POOL, _error_line, signal_name

# nothing left behind is checked machine-wide (sandbox uids, cgroups, temp folders): another
# pytest-xdist worker's sandbox runs would look like leaks
pytestmark = pytest.mark.alone
TIMEOUT = 3.0
REPO = Path(__file__).resolve().parents[2]
SENTINEL = "rlsvc-sentinel-7f3a9c"


@pytest.fixture(scope="module")
def box() -> LocalSandbox:
    return LocalSandbox(SandboxLimits(memory_mb=256, cpu_s=5, processes=16))


def sandbox_processes() -> list[int]:
    """PIDs of live processes owned by a sandbox uid (a zombie is dead: it waits for the node's
    init to reap it)."""
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(ln.split(":", 1) for ln in status.read_text().splitlines() if ":" in ln)
        except OSError:
            continue
        if (
            "Uid" in fields
            and UID_BASE <= int(fields["Uid"].split()[0]) < UID_BASE + UID_POOL
            and not fields["State"].strip().startswith("Z")
        ):
            pids.append(int(status.parent.name))
    return pids


def leftovers() -> list[str]:
    """The sandbox's folders in the temp folder, and its runs' cgroups (v1 and v2 layouts)."""
    cgroups = [*Path("/sys/fs/cgroup").glob("*/rlsvc-sandbox/run-*"), *Path("/sys/fs/cgroup").glob("rlsvc-sandbox/run-*")]
    return sorted(p.name for p in [*Path(tempfile.gettempdir()).glob("rlsvc-sbx-*"), *cgroups])


def check_clean(box: LocalSandbox, before: list[str]) -> None:
    deadline = time.time() + 5
    while sandbox_processes() and time.time() < deadline:
        time.sleep(0.1)
    assert sandbox_processes() == [], "a sandboxed process outlived its run"
    assert leftovers() == before, "a sandbox folder was left behind"
    ok = box.run("print(6 * 7)", timeout_s=TIMEOUT)  # still serving
    assert ok.stdout == "42\n" and ok.exit_code == 0 and ok.error is None


def test_plain_code_and_errors(box):
    r = box.run("import sys\nprint('out')\nprint('err', file=sys.stderr)", timeout_s=TIMEOUT)
    assert (r.stdout, r.stderr, r.exit_code, r.timed_out, r.error) == ("out\n", "err\n", 0, False, None)
    r = box.run("def f():\n    return 1 / 0\nf()", timeout_s=TIMEOUT)
    assert r.exit_code == 1 and r.error == "ZeroDivisionError: division by zero" and "Traceback" in r.stderr
    r = box.run("raise SystemExit(3)", timeout_s=TIMEOUT)
    assert r.exit_code == 3 and r.error == "exit status 3"


HOSTILE = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "memory bomb": "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))",
    "infinite loop": "while True:\n    pass",
    "output flood": "while True:\n    print('x' * 1000)",
    # the run's PID 1 leaves the process group the sandbox kills on timeout: it must still die
    # (its parent-death signal, set again after the uid change)
    "leaves the process group": "import os, time\nos.setsid()\ntime.sleep(60)",
    "background children": (
        "import os, subprocess\n"
        "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(60)\n"
        "print('parent done')"
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_snippets_end_within_limits_and_leave_nothing(box, name):
    before = leftovers()
    t0 = time.perf_counter()
    r = box.run(HOSTILE[name], timeout_s=TIMEOUT)
    assert time.perf_counter() - t0 < TIMEOUT + 3
    if name == "memory bomb":
        assert not r.timed_out and "MemoryError" in r.error
    elif name == "background children":
        assert r.stdout == "parent done\n" and r.exit_code == 0  # its children died with the run
    elif name == "output flood":
        assert len(r.stdout) <= 64 * 1024 and r.error is not None
    else:
        assert r.timed_out and r.error.startswith("TimeoutError")
    check_clean(box, before)


HOSTILE_TREES = {
    # deeper than Python's recursion limit: shutil.rmtree raised RecursionError here
    "a tree 3000 folders deep": "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')",
    "paths longer than PATH_MAX": "import os\nfor _ in range(40):\n    os.mkdir('x' * 200)\n    os.chdir('x' * 200)",
    "folders it cannot read or enter": (
        "import os\nos.makedirs('locked/inner')\nopen('locked/inner/f', 'w').write('x')\nos.chmod('locked/inner', 0)\nos.chmod('locked', 0)"
    ),
    "a fifo, a socket, and links to the host": (
        "import os, socket\nos.mkfifo('fifo')\nsocket.socket(socket.AF_UNIX).bind('sock')\n"
        "os.symlink('/etc', 'etc-link')\nos.symlink('etc-link', 'loop-a')\nos.link('/tmp/main.py', 'hard')"
    ),
}


@pytest.mark.parametrize("name", HOSTILE_TREES)
def test_what_a_run_leaves_in_its_folder_is_removed_without_failing_the_run(box, name):
    before = leftovers()
    r = box.run(HOSTILE_TREES[name] + "\nprint('left it')", timeout_s=20)
    assert r.stdout == "left it\n" and r.error is None, r.stderr[-500:]
    assert Path("/etc/hostname").exists() or Path("/etc/passwd").exists()  # a link's target is not followed
    check_clean(box, before)


# x86_64 numbers where glibc has no wrapper (CI's machine); errno after each denied call
SYSCALLS = {"keyctl": 250, "io_uring_setup": 425, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323}
KERNEL_SURFACE = {
    "a new user namespace (full capabilities inside)": "libc.unshare(0x10000000)",
    "a new mount namespace through clone": "libc.syscall(56, 0x00020000 | 17, 0, 0, 0, 0)",  # clone(CLONE_NEWNS | SIGCHLD)
    "joining a namespace": "libc.setns(os.open('/proc/self/ns/net', os.O_RDONLY), 0)",
    "mounting": "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
    "the session keyring": f"libc.syscall({SYSCALLS['keyctl']}, 0, -3, 0, 0, 0)",  # KEYCTL_GET_KEYRING_ID
    "io_uring": f"libc.syscall({SYSCALLS['io_uring_setup']}, 8, ctypes.create_string_buffer(120))",
    "bpf": f"libc.syscall({SYSCALLS['bpf']}, 5, ctypes.create_string_buffer(128), 128)",  # BPF_PROG_LOAD
    "ptrace": "libc.ptrace(0, 0, 0, 0)",  # PTRACE_TRACEME
    "perf events": f"libc.syscall({SYSCALLS['perf_event_open']}, ctypes.create_string_buffer(128), 0, -1, -1, 0)",
    "userfaultfd": f"libc.syscall({SYSCALLS['userfaultfd']}, 0)",
}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the syscall numbers above are x86_64's")
@pytest.mark.parametrize("name", KERNEL_SURFACE)
def test_kernel_surface_is_denied_by_the_syscall_filter(box, name):
    code = f"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nprint({KERNEL_SURFACE[name]}, ctypes.get_errno())"
    r = box.run(code, timeout_s=TIMEOUT)
    assert r.error is None, r.stderr[-500:]
    assert r.stdout.split() == ["-1", str(errno.EPERM)]


def test_ordinary_programs_still_run_under_the_filter(box):
    """Threads, subprocesses and multiprocessing (clone3 answers ENOSYS; the C library falls
    back to clone without namespace flags), ctypes, and the program's own __main__ guard."""
    code = (
        "import ctypes.util, multiprocessing, subprocess, threading\n"
        "out = []\nt = threading.Thread(target=out.append, args=('thread',))\nt.start()\nt.join()\n"
        "out.append(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout.strip())\n"
        "if __name__ == '__main__':\n"
        "    p = multiprocessing.Process(target=print, args=('process',))\n    p.start()\n    p.join()\n"
        "    print(*out, ctypes.util.find_library('c') is not None)"
    )
    r = box.run(code, timeout_s=10)
    assert (r.stdout, r.error) == ("process\nthread child True\n", None), r.stderr[-500:]


def test_the_run_sees_a_minimal_root(box, tmp_path):
    """Its root is built for it: the system's /usr read-only with its package folders covered,
    empty writable tmpfs elsewhere; not the project (where the hidden tests live), not the
    service's files, not a unix socket of the host."""
    from rlsvc.problems.programming import PROBLEMS_FILE

    host_socket = socket.socket(socket.AF_UNIX)
    host_socket.bind(str(tmp_path / "host.sock"))
    host_socket.listen()
    code = f"""
import os, socket
print(sorted(os.listdir("/")))
print(os.path.exists({str(PROBLEMS_FILE)!r}), os.path.exists({str(REPO)!r}), os.path.exists("/root"), os.path.exists("/opt"))
print(sorted({{n for d in {box.site_dirs!r} if os.path.isdir(d) for n in os.listdir(d)}}))
print([os.listdir(d) for d in ("/run", "/var", "/home", "/etc")])
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({str(tmp_path / "host.sock")!r})
    print("connected")
except OSError as e:
    print(type(e).__name__)
try:
    open("/usr/rlsvc-probe", "w")
except OSError as e:
    print(e.errno == 30)
open("/run/rlsvc-probe", "w").write("gone with the run")
"""
    try:
        r = box.run(code, timeout_s=TIMEOUT)
    finally:
        host_socket.close()
    assert r.error is None, r.stderr[-500:]
    lines = r.stdout.splitlines()
    assert set(ast.literal_eval(lines[0])) <= {
        "bin",
        "dev",
        "etc",
        "home",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "run",
        "sbin",
        "tmp",
        "usr",
        "var",
    }
    assert lines[1:] == ["False False False False", "[]", "[[], [], [], ['ld.so.cache']]", "FileNotFoundError", "True"]
    assert not Path("/run/rlsvc-probe").exists()


def test_no_writes_outside_its_folder(box, tmp_path):
    before = leftovers()
    target = tmp_path / "owned.txt"
    tmp_path.chmod(0o755)
    code = f"""
import os
results = {{}}
for path in [{str(target)!r}, '/etc/rlsvc-sandbox-test', {str(Path(tempfile.gettempdir()) / "rlsvc-escape.txt")!r}, '/dev/shm/x', 'inside.txt']:
    try:
        with open(path, 'w') as f:
            f.write('x')
        results[path] = 'written'
    except OSError as e:
        results[path] = type(e).__name__
print(results)
"""
    r = box.run(code, timeout_s=TIMEOUT)
    assert r.exit_code == 0, r.stderr
    assert not target.exists() and not Path("/etc/rlsvc-sandbox-test").exists()
    assert not Path(tempfile.gettempdir(), "rlsvc-escape.txt").exists()  # /tmp was the run's own folder
    assert "'inside.txt': 'written'" in r.stdout
    check_clean(box, before)


def test_no_secrets_from_the_service(box, monkeypatch, tmp_path):
    monkeypatch.setenv("TOGETHER_API_KEY", SENTINEL)
    secret_file = tmp_path / "secret"
    secret_file.write_text(SENTINEL)
    secret_file.chmod(0o600)
    code = f"""
import os, glob
seen = [repr(dict(os.environ))]
for path in glob.glob('/proc/*/environ') + [{str(secret_file)!r}, '/proc/1/cmdline']:
    try:
        seen.append(open(path, 'rb').read().decode('latin-1'))
    except OSError:
        pass
print(len(glob.glob('/proc/[0-9]*')), 'processes visible')
print('\\n'.join(seen))
"""
    r = box.run(code, timeout_s=TIMEOUT)
    assert r.exit_code == 0, r.stderr
    assert SENTINEL not in r.stdout + r.stderr
    assert int(r.stdout.split(" processes visible")[0]) <= 3  # its own PID namespace


def test_no_network(box):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
        r = box.run(code, timeout_s=TIMEOUT)
    assert "connected" not in r.stdout and r.error and ("OSError" in r.error or "Error" in r.error)


def test_cli_prints_the_result_as_json():
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.sandbox", "--timeout", "5"], input="print('hello')\n1/0\n", capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["stdout"] == "hello\n" and result["exit_code"] == 1 and result["timed_out"] is False
    assert result["error"] == "ZeroDivisionError: division by zero" and set(result) >= {
        "stdout",
        "stderr",
        "exit_code",
        "timed_out",
        "error",
    }
    bad = subprocess.run([sys.executable, "-m", "rlsvc.sandbox", "--timeout", "0"], input="", capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_a_node_that_cannot_confine_code_is_refused_at_start(monkeypatch):
    """If the namespaces cannot be set up (a container without the capability), the sandbox says
    so once, at start, instead of every run looking like the code's own error."""
    import rlsvc.sandbox.local as local
    from rlsvc.sandbox import SandboxUnavailable

    monkeypatch.setattr(local, "_INSIDE", local._INSIDE.replace("mount --bind", "mount --no-such-flag --bind"))
    with pytest.raises(SandboxUnavailable, match="cannot confine code on this node"):
        LocalSandbox()


def test_run_uids_are_leased_node_wide(tmp_path):
    """Two runs never share a uid: not across threads of one process (POSIX locks are per
    process, the pool's own set covers that), nor across processes (the lock file's byte ranges)."""
    import contextlib

    from rlsvc.sandbox.local import SandboxUnavailable, UidPool

    lock = tmp_path / "uids.lock"
    pool = UidPool(lock, base=1000, size=3)
    with contextlib.ExitStack() as stack:
        held = {stack.enter_context(pool.lease()) for _ in range(3)}
        assert held == {1000, 1001, 1002}
        with pytest.raises(SandboxUnavailable), pool.lease():
            pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom rlsvc.sandbox.local import UidPool\n"
            f"with UidPool(Path({str(lock)!r}), base=1000, size=2).lease() as uid:\n"
            "    print(uid, flush=True)\n    time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        theirs = int(holder.stdout.readline())
        with UidPool(lock, base=1000, size=2).lease() as mine:
            assert {mine, theirs} == {1000, 1001}
        other = 1000 if theirs == 1001 else 1001
        with UidPool(lock, base=other, size=1).lease() as free:
            assert free == other
        with pytest.raises(SandboxUnavailable), UidPool(lock, base=theirs, size=1).lease():
            pass
    finally:
        holder.kill()
        holder.wait()
    with UidPool(lock, base=theirs, size=1).lease() as uid:  # the kernel dropped the dead holder's lock
        assert uid == theirs


def _cgroups_here() -> str | None:
    import os

    from rlsvc.sandbox import cgroup

    return "not root" if os.geteuid() != 0 else cgroup.available()


needs_cgroups = pytest.mark.skipif(_cgroups_here() is not None, reason=f"no per-run cgroups here: {_cgroups_here()}")
TOUCH_100MB = "b = bytearray(100 * 2**20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"


@needs_cgroups
def test_the_runs_processes_together_stay_within_the_runs_memory():
    """Four processes, each within the per-process limit, cannot together hold more than the
    run's memory: the kernel kills some of them; a run whose own process goes past it is reported
    in one line."""
    box = LocalSandbox(SandboxLimits(memory_mb=256, run_memory_mb=256, cpu_s=5, processes=16))
    before = leftovers()
    code = "import os, time\nkids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
    code += "".join(f"        {line}\n" for line in TOUCH_100MB.splitlines())
    code += "        time.sleep(2)\n        os._exit(0)\n    kids.append(pid)\nprint([os.waitpid(p, 0)[1] for p in kids])"
    r = box.run(code, timeout_s=15)
    statuses = ast.literal_eval(r.stdout)
    assert r.exit_code == 0 and len(statuses) == 4 and statuses.count(0) <= 2 and statuses.count(9) >= 2, r  # SIGKILLed
    one = LocalSandbox(SandboxLimits(memory_mb=1024, run_memory_mb=128, cpu_s=5, processes=16))
    r = one.run("b = bytearray(300 * 2**20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\nprint('held')", timeout_s=15)
    assert r.stdout == "" and r.error == "Killed: memory limit of the run (128 MB, all its processes together)", r
    check_clean(box, before)


@needs_cgroups
def test_the_runs_cpu_share_is_its_cgroups_quota():
    """Two busy processes for 1.5 s of wall clock get about half a core together (cpus=0.5), not
    the two cores they would take."""
    box = LocalSandbox(SandboxLimits(cpus=0.5, cpu_s=5, processes=16))
    code = (
        "import os, time\nt0 = time.time()\npid = os.fork()\nwhile time.time() - t0 < 1.5:\n    pass\n"
        "if pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nt = os.times()\n"
        "print(t.user + t.system + t.children_user + t.children_system, time.time() - t0)"
    )
    cpu, wall = map(float, box.run(code, timeout_s=15).stdout.split())
    assert cpu <= 0.5 * wall * 1.3 + 0.1, (cpu, wall)


CLI_HOSTILE = ("fork bomb", "memory bomb", "leaves the process group", "background children")


@pytest.mark.parametrize("name", CLI_HOSTILE)
def test_hostile_snippets_through_the_cli_are_contained(box, name):
    """The same battery through `python -m rlsvc.sandbox`, the entry point people try code with."""
    before = leftovers()
    out = subprocess.run(
        [sys.executable, "-m", "rlsvc.sandbox", "--timeout", str(TIMEOUT), "--memory-mb", "256"],
        input=HOSTILE[name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    if name == "memory bomb":
        assert not r["timed_out"] and "MemoryError" in r["error"]
    elif name == "background children":
        assert r["stdout"] == "parent done\n" and r["exit_code"] == 0
    else:
        assert r["timed_out"] and r["error"].startswith("TimeoutError")
    check_clean(box, before)


# -- hardening round 3 (issue 56) --------------------------------------------------------------


def test_every_exit_status_and_every_signal_is_classified_without_raising():
    """A status above 128 is the code's own (os._exit(163)): it was read as signal 35, which has
    no name, and raised. Every status 0-255 and every signal number the kernel has (1 to
    SIGRTMAX, named or not) gets its one line."""
    limits = SandboxLimits()
    assert _error_line("", 0, False, 1.0, limits) is None
    for status in range(1, 256):
        assert _error_line("", status, False, 1.0, limits) == f"exit status {status}"
    names = set()
    for number in range(1, signal.SIGRTMAX + 1):
        line = _error_line("", -number, False, 1.0, limits)
        assert line.startswith("Killed: ") and line.count("\n") == 0
        names.add(signal_name(number))
    assert len(names) == signal.SIGRTMAX  # one distinct name each
    assert _error_line("", -9, False, 1.0, limits, out_of_memory=True).startswith("Killed: memory limit of the run")


def _cli_run(code: bytes | str, *args: str) -> dict:
    data = code.encode() if isinstance(code, str) else code
    out = subprocess.run([sys.executable, "-m", "rlsvc.sandbox", "--timeout", "5", *args], input=data, capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("status", [1, 2, 126, 127, 128, 129, 137, 163, 200, 255])
def test_exit_statuses_above_128_come_back_as_statuses_through_the_cli(status):
    r = _cli_run(f"import os\nos._exit({status})")
    assert (r["exit_code"], r["error"], r["timed_out"]) == (status, f"exit status {status}", False)


def test_a_real_signal_still_comes_back_as_a_signal(box):
    r = box.run("import ctypes\nctypes.string_at(0)", timeout_s=TIMEOUT)
    assert r.exit_code == -signal.SIGSEGV and r.error == "Killed: segmentation fault"


def test_the_cli_prints_its_json_whatever_happens(monkeypatch, capsys):
    r = _cli_run(b"print('\xff')\n")  # not UTF-8: the run's own SyntaxError
    assert r["exit_code"] == 1 and r["error"].startswith("SyntaxError")
    from rlsvc.sandbox import __main__ as cli

    class Broken:  # a node whose sandbox fails mid-run (its own fault, not the code's)
        def __init__(self, limits):
            pass

        def run(self, code, timeout_s=5.0):
            raise OSError("no space left for the run's folder")

    monkeypatch.setattr(cli, "LocalSandbox", Broken)
    monkeypatch.setattr(sys, "stdin", type("In", (), {"buffer": __import__("io").BytesIO(b"print(1)")})())
    assert cli.main(["--timeout", "2"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["error"] == "sandbox failed: OSError: no space left for the run's folder" and result["exit_code"] is None


def test_text_that_is_not_utf8_is_replaced_at_the_boundary():
    r = SandboxResult("out \ud800", "err \udfff\udc80", 1, False, "ValueError: \ud800")
    assert (r.stdout, r.stderr, r.error, r.replaced) == ("out \ufffd", "err \ufffd\ufffd", "ValueError: \ufffd", 4)
    json.dumps(r.to_dict(), ensure_ascii=False).encode("utf-8")  # encodes


DISK_FILL = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("reserved", os.O_CREAT | os.O_WRONLY)
kept = libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(96 * 2**20))  # FALLOC_FL_KEEP_SIZE: past the file-size limit
print("keep_size", kept, ctypes.get_errno(), os.fstat(fd).st_blocks * 512 // 2**20)
os.close(fd)
os.unlink("reserved")
written = 0
try:
    for i in range(24):  # 24 files of 4 MB, each within the 8 MB file-size limit: 96 MB
        with open(f"f{i}", "wb") as f:
            for _ in range(4):
                f.write(b"x" * 2**20)
                written += 1
except OSError as e:
    print("stopped", e.errno)
st = os.statvfs("/tmp")
print("written", written, "size", st.f_blocks * st.f_frsize // 2**20)
"""


def test_the_runs_writable_space_is_a_tmpfs_of_its_size_and_fallocate_is_bounded_by_it():
    """/tmp was host disk with a per-file limit only: 128 files within it took 1 GB, and
    fallocate(FALLOC_FL_KEEP_SIZE) reserved 256 MB in one file past that limit."""
    box = LocalSandbox(SandboxLimits(disk_mb=32))
    r = box.run(DISK_FILL, timeout_s=20)
    assert r.error is None, r.stderr[-500:]
    lines = {ln.split()[0]: ln.split()[1:] for ln in r.stdout.splitlines()}
    assert lines["keep_size"][0] == "-1" and int(lines["keep_size"][2]) <= 32  # refused, nothing reserved past the size
    assert lines["stopped"] == [str(errno.ENOSPC)]
    assert int(lines["written"][0]) <= 32 and lines["written"][2] == "32"


SWITCH_OFF_ERRORS = {
    "points fd 2 at /dev/null": "import os\nos.dup2(os.open(os.devnull, os.O_WRONLY), 2)",
    "replaces sys.stderr": "import sys, io\nsys.stderr = io.StringIO()",
    "closes every descriptor": None,  # in the raising cell itself, below
}


@pytest.mark.parametrize("name", SWITCH_OFF_ERRORS)
def test_a_cell_that_raises_counts_whatever_an_earlier_cell_did_to_stderr(box, name):
    session = LocalSession(box, TIMEOUT)
    first = SWITCH_OFF_ERRORS[name]
    if first is not None:
        assert session.execute(first).error is None
        r = session.execute("1/0")
        assert (r.exit_code, r.error) == (1, "ZeroDivisionError: division by zero")
    else:
        r = session.execute("import os\nos.closerange(0, 4096)\nraise ValueError('hidden')")
        assert r.exit_code == 1 and r.error is not None
    ok = session.execute("print('still here')")  # the positive control: a benign cell prints, no error
    assert (ok.stdout, ok.error) == ("still here\n", None)


def test_a_forged_error_mark_with_a_clean_exit_is_not_an_error(box):
    session = LocalSession(box, TIMEOUT)
    r = session.execute(f"import sys\nprint({ERROR_MARK!r}, file=sys.stderr)\nprint('ok')")
    assert r.error is None and r.exit_code == 0 and session.cells


def test_no_host_kernel_events_through_netlink():
    """A NETLINK_KOBJECT_UEVENT socket received the host's device events; every netlink socket
    is refused now (through the CLI), and name resolution still works without it."""
    code = "import socket\ns = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15)\ns.bind((0, 1))\nprint('subscribed')"
    r = _cli_run(code)
    assert "subscribed" not in r["stdout"] and r["error"] == "PermissionError: [Errno 1] Operation not permitted"
    r = _cli_run("import socket\nprint(socket.getaddrinfo('127.0.0.1', 80, flags=socket.AI_ADDRCONFIG)[0][4])")
    assert (r["stdout"], r["error"]) == ("('127.0.0.1', 80)\n", None)
