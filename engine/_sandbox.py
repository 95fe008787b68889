"""Kernel confinement of what tools do, with Linux Landlock (SPEC §25).

Owns: the sandbox modes and their validation (R-BOX-1), the probe of what the kernel offers and
the refusal to start a mode it cannot enforce (R-BOX-2), the rule set of one session's tools (the
paths they may read and write, TCP denied when the network is off), and running a blocking
function in a fresh thread that has confined itself, so that whatever it does — open a file, fork
and exec a command — happens under the rules.  Does not: decide which tool runs (``_local``),
frame or time out a tool, or record settings (the session does).

Why a fresh thread: Landlock confines the calling thread and everything it starts later, and
nothing can ever lift it.  A process spawned by a confined thread is confined before its first
instruction, with no interpreter start-up of a launcher in between (anyio's ``open_process`` has
no ``preexec_fn``, and ``preexec_fn`` is unsafe in a threaded program anyway).  The thread exits
right after, so no worker of a pool is ever left confined.

The rule set is built from scratch for every confined call, so it sees the directories as they are
now.  Landlock grants rights on whole hierarchies and cannot subtract a subtree, so "read
everything but the data root" is spelled by granting every sibling along the path to the data
root and only ``READ_DIR`` on the directories of that path (names can be listed there; contents
of what is excluded cannot be read, nor can anything created later in those directories).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeVar, cast, get_args

from ._exceptions import SandboxUnavailable

if TYPE_CHECKING:
    from ._protocols import Sandboxed

__all__ = [
    "SANDBOX_MODES",
    "Confinement",
    "SandboxMode",
    "SandboxPolicy",
    "landlock_abi",
    "make_private_tmpdir",
    "run_confined",
    "sandbox_tmp_parent",
    "sandboxed",
]

SandboxMode = Literal["workspace-write", "read-only", "off"]
SANDBOX_MODES: Final[tuple[SandboxMode, ...]] = get_args(SandboxMode)

T = TypeVar("T")

# --------------------------------------------------------------------------- the kernel ABI

# Syscall numbers are the same on every architecture that has Landlock (the unified table).
_SYS_CREATE_RULESET: Final = 444
_SYS_ADD_RULE: Final = 445
_SYS_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1 << 0
_RULE_PATH_BENEATH: Final = 1
_PR_SET_NO_NEW_PRIVS: Final = 38

# Access rights on the file system (include/uapi/linux/landlock.h), with the ABI that added them.
FS_EXECUTE: Final = 1 << 0
FS_WRITE_FILE: Final = 1 << 1
FS_READ_FILE: Final = 1 << 2
FS_READ_DIR: Final = 1 << 3
FS_REMOVE_DIR: Final = 1 << 4
FS_REMOVE_FILE: Final = 1 << 5
FS_MAKE_CHAR: Final = 1 << 6
FS_MAKE_DIR: Final = 1 << 7
FS_MAKE_REG: Final = 1 << 8
FS_MAKE_SOCK: Final = 1 << 9
FS_MAKE_FIFO: Final = 1 << 10
FS_MAKE_BLOCK: Final = 1 << 11
FS_MAKE_SYM: Final = 1 << 12
FS_REFER: Final = 1 << 13  # ABI 2
FS_TRUNCATE: Final = 1 << 14  # ABI 3
FS_IOCTL_DEV: Final = 1 << 15  # ABI 5
NET_BIND_TCP: Final = 1 << 0  # ABI 4
NET_CONNECT_TCP: Final = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
SCOPE_SIGNAL: Final = 1 << 1  # ABI 6

# The rights each ABI handles: everything it knows is handled, so nothing new is left open.
_FS_BY_ABI: Final = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
# Rights that mean something on a file (the others only on directories).
_FILE_RIGHTS: Final = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

READ: Final = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# Device nodes are never made (root could mknod the disk inside the workspace and write it).
WRITE: Final = (
    FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
)
# The devices every shell script writes or reads; a terminal (ioctl TIOCSTI) is not among them.
_DEVICES: Final = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# What each part of a policy needs of the kernel.
FS_ABI: Final = 3  # truncate(2) is handled from ABI 3 on; before it, any file could be emptied
NET_ABI: Final = 4


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.syscall.restype = ctypes.c_long
    return libc


@functools.cache
def landlock_abi() -> int:
    """The Landlock ABI version the running kernel offers; 0 when it offers none (not Linux,
    too old, or Landlock not enabled at boot)."""
    libc = _libc()
    if libc is None:
        return 0
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(abi), 0)


def _os_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True, kw_only=True)
class SandboxPolicy:
    """What a session's tools may do (R-BOX-1): ``mode`` for the file system, ``network`` for
    TCP.  ``network`` left ``None`` follows the mode: off in a sandbox, on with ``"off"``."""

    mode: SandboxMode = "workspace-write"
    network: bool = False

    @classmethod
    def of(cls, mode: str | None = None, network: bool | None = None) -> SandboxPolicy:
        chosen: str = "workspace-write" if mode is None else mode
        if chosen not in SANDBOX_MODES:
            raise ValueError(
                f"unknown sandbox mode {chosen!r}: choose one of {', '.join(SANDBOX_MODES)}"
            )
        if network is not None and not isinstance(network, bool):
            raise TypeError(f"network must be true or false, not {network!r}")
        net = (chosen == "off") if network is None else network
        return cls(mode=chosen, network=net)

    @property
    def confines_files(self) -> bool:
        return self.mode != "off"

    @property
    def confined(self) -> bool:
        """Whether any kernel rule applies (the file system, or TCP with the network off)."""
        return self.confines_files or not self.network

    def needed_abi(self) -> int:
        return max(FS_ABI if self.confines_files else 0, 0 if self.network else NET_ABI)

    def check(self, abi: int | None = None) -> None:
        """Raise ``SandboxUnavailable`` unless the kernel can enforce this policy (R-BOX-2)."""
        offered = landlock_abi() if abi is None else abi
        if offered >= self.needed_abi():
            return
        offer = "no Landlock" if offered == 0 else f"Landlock ABI {offered}"
        if self.confines_files and offered < FS_ABI:
            need = f"sandbox {self.mode!r} needs Linux Landlock ABI {FS_ABI} or later"
            escape = "choose sandbox 'off' explicitly to run tools unconfined"
        else:
            need = f"network off needs Linux Landlock ABI {NET_ABI} or later (TCP rules)"
            escape = "allow the network explicitly (network = true) to run without TCP rules"
        raise SandboxUnavailable(f"{need}; this kernel offers {offer}: {escape}", policy=self)

    def describe(self) -> str:
        """One line for a header: ``sandbox workspace-write, network off``."""
        return f"sandbox {self.mode}, network {'on' if self.network else 'off'}"

    def settings(self) -> dict[str, object]:
        """The settings record's ``sandbox`` value (SPEC §23)."""
        return {"mode": self.mode, "network": self.network}


@dataclass(frozen=True, kw_only=True)
class Confinement:
    """A policy bound to one session's paths: what its tools may read and write.

    ``workspace`` and ``tmpdir`` are writable in ``workspace-write``, ``scratchpad`` too;
    ``read-only`` writes only ``tmpdir``.  Everything else is readable except ``hidden``
    (the data root, the parent of every session's private temporary directory), of which only
    ``own`` (the session's scratchpad and trace files) is given back.
    """

    policy: SandboxPolicy
    workspace: Path
    tmpdir: Path | None = None
    scratchpad: Path | None = None
    hidden: tuple[Path, ...] = ()
    own: Callable[[], Sequence[Path]] = field(default=lambda: ())

    def writable(self) -> list[Path]:
        """The roots a file tool may write below, resolved."""
        if self.policy.mode == "off":
            return [self.workspace] + ([self.scratchpad] if self.scratchpad else [])
        roots: list[Path | None] = [self.tmpdir]
        if self.policy.mode == "workspace-write":
            roots += [self.workspace, self.scratchpad]
        return [Path(os.path.realpath(r)) for r in roots if r is not None]

    def beside_hidden(self, path: Path) -> Path | None:
        """The hidden directory that keeps ``path`` (not yet existing) from being created: its
        first existing ancestor lies on the way from the workspace to it (see ``_carve``)."""
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if existing == path:
            return None
        for hidden in self.hidden:
            h = Path(os.path.realpath(hidden))
            if (
                h != existing
                and h.is_relative_to(existing)
                and existing.is_relative_to(os.path.realpath(self.workspace))
            ):
                return h
        return None

    def rules(self) -> list[tuple[Path, int]]:
        """``(path, rights)`` pairs, for paths that exist now."""
        out: list[tuple[Path, int]] = []
        if not self.policy.confines_files:
            return out
        hidden = [Path(os.path.realpath(p)) for p in self.hidden]
        _carve(Path("/"), READ, hidden, out)
        write = READ | WRITE
        ws = Path(os.path.realpath(self.workspace))
        ws_rights = write if self.policy.mode == "workspace-write" else READ
        _carve(ws, ws_rights, [h for h in hidden if h != ws and not ws.is_relative_to(h)], out)
        if self.scratchpad is not None:
            pad_rights = write if self.policy.mode == "workspace-write" else READ
            _grant(Path(os.path.realpath(self.scratchpad)), pad_rights, out)
        for path in self.own():
            _grant(Path(path), READ, out)
        if self.tmpdir is not None:
            _grant(Path(self.tmpdir), write, out)
        for device in _DEVICES:
            _grant(Path(device), FS_READ_FILE | FS_WRITE_FILE | FS_IOCTL_DEV, out)
        return out


def _grant(path: Path, rights: int, out: list[tuple[Path, int]]) -> None:
    if path.exists():
        out.append((path, rights))


def _carve(top: Path, rights: int, hidden: Sequence[Path], out: list[tuple[Path, int]]) -> None:
    """Grant ``rights`` on ``top``'s hierarchy minus the ``hidden`` ones below it."""
    if any(top == h or top.is_relative_to(h) for h in hidden):
        return
    inside = [h for h in hidden if h.is_relative_to(top)]
    if not inside:
        out.append((top, rights))
        return
    # A directory on the way to a hidden one: its names may be listed, nothing inherits more.
    out.append((top, rights & FS_READ_DIR))
    on_the_way = {h.relative_to(top).parts[0] for h in inside}
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                continue  # the target is granted (or not) on its own path
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if entry.name in on_the_way:
            _carve(top / entry.name, rights, inside, out)
        else:  # most entries: no path arithmetic, and the file rights masked here already
            out.append((Path(entry.path), rights if is_dir else rights & _FILE_RIGHTS))


# --------------------------------------------------------------------------- applying the rules


def _restrict_this_thread(policy: SandboxPolicy, rules: Iterable[tuple[Path, int]]) -> None:
    """Confine the calling thread (and what it starts) for good; raise ``OSError`` if the kernel
    refuses any step — the caller then runs nothing."""
    libc = _libc()
    abi = landlock_abi()
    if libc is None or abi == 0:
        raise OSError("Landlock is not available")
    handled_fs = 0
    if policy.confines_files:
        handled_fs = _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]
    handled_net = 0 if policy.network or abi < NET_ABI else NET_BIND_TCP | NET_CONNECT_TCP
    scoped = 0
    if abi >= 6:
        if policy.confines_files:
            scoped |= SCOPE_SIGNAL  # no signal to the engine or anything outside the sandbox
        if not policy.network:
            scoped |= SCOPE_ABSTRACT_UNIX_SOCKET
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= NET_ABI else 8)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise _os_error("landlock_create_ruleset")
    try:
        for path, rights in rules:
            _add_path_rule(libc, int(ruleset), path, rights & handled_fs)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _os_error("prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_SYS_RESTRICT_SELF, int(ruleset), 0) != 0:
            raise _os_error("landlock_restrict_self")
    finally:
        os.close(int(ruleset))


def _add_path_rule(libc: ctypes.CDLL, ruleset: int, path: Path, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # vanished or unreadable since it was listed: nothing granted, nothing lost
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        if not rights:
            return
        attr = _PathBeneathAttr(rights, fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(attr), 0) != 0:
            raise _os_error(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


def run_confined(confinement: Confinement | None, fn: Callable[[], T]) -> T:
    """``fn()`` in a fresh thread confined by ``confinement`` (``None`` or an unconfined policy:
    called directly).  Blocking: call it from a worker thread.  Its result or exception is
    returned or raised here; if the rules cannot be applied, ``fn`` does not run."""
    if confinement is None or not confinement.policy.confined:
        return fn()
    confinement.policy.check()
    outcome: list[tuple[bool, object]] = []

    def confined() -> None:
        try:
            _restrict_this_thread(confinement.policy, confinement.rules())
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=confined, name="penguin-sandbox", daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise cast(BaseException, value)
    return cast(T, value)


def apply_sandbox(
    environment: object, mode: str | None, network: bool | None
) -> SandboxPolicy | None:
    """Give ``environment`` the sandbox a session asks for and return the policy in force.

    A ``Sandboxed`` environment takes ``mode``/``network`` (``None``: what it has) and checks the
    kernel.  Any other environment runs no tool under a sandbox: asking it for one is refused
    (never silently unconfined); ``None`` is returned when nothing was asked."""
    from ._protocols import Sandboxed  # the protocols module names this one's types

    if isinstance(environment, Sandboxed):
        current = environment.sandbox
        if mode is None and network is None:
            policy = current
        else:
            policy = SandboxPolicy.of(current.mode if mode is None else mode, network)
        environment.set_sandbox(policy)
        return policy
    if mode is None and network is None:
        return None
    policy = SandboxPolicy.of(mode, network)
    if policy.confined:
        raise SandboxUnavailable(
            f"{type(environment).__name__} does not run its tools under a sandbox: choose "
            "sandbox 'off' with the network on explicitly, or use an environment that does",
            policy=policy,
        )
    return policy


def sandboxed(environment: object) -> Sandboxed | None:
    """The environment that holds a session's sandbox: ``environment`` itself, or the one a
    session's tool composition (MCP servers, approval rules) routes the local tools to."""
    from ._protocols import Sandboxed

    for candidate in (environment, getattr(environment, "primary", None)):
        if isinstance(candidate, Sandboxed):
            return candidate
    return None


# --------------------------------------------------------------------------- private temp dirs


def sandbox_tmp_parent(data_root: Path | None = None) -> Path:
    """The parent of sessions' private temporary directories, created 0700 and hidden from every
    sandbox but through its own child: ``<data root>/.sandbox-tmp`` (hidden with the data root,
    no extra rule), or ``<system temp>/penguin-sandbox-<uid>`` for an environment that serves
    no session."""
    if data_root is not None and data_root.is_dir():
        parent = data_root / ".sandbox-tmp"
    else:
        parent = Path(tempfile.gettempdir()) / f"penguin-sandbox-{os.getuid()}"
    try:
        parent.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = parent.lstat()
    if not parent.is_dir() or parent.is_symlink() or st.st_uid != os.getuid():
        raise OSError(f"not a private directory of this user: {parent}")
    if st.st_mode & 0o077:
        os.chmod(parent, 0o700)
    return parent


def make_private_tmpdir(data_root: Path | None = None) -> Path:
    """A new private temporary directory for one session's tools (mode 0700)."""
    return Path(tempfile.mkdtemp(prefix="", dir=sandbox_tmp_parent(data_root)))
