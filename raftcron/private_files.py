"""Files and directories only their owner can use, from the moment they exist. It stands
alone at the top of the package, in no layer, because the node's side and the operator's
make files the same way: `ops` (backups, the local cluster) and `cli` (deploy init,
restore) both use it, and it imports nothing else of the package.

The state database holds the cluster's webhook key and the target headers of every job,
the Raft files hold the same, and backups, the cluster secret and tokens are secrets
themselves. Everything raftcron writes under a data directory, a backup and every secret
is therefore created with mode 0600 (directories 0700) in the call that creates it: never
written first and `chmod`-ed after (another local user can open the file in between and
keep reading through that descriptor), and never left to the caller's umask (a CLI run
from a shell whose umask is 022 would make 0644 files).

A mode given to `open`/`mkdir` is masked by the umask, which only ever removes bits: 0600
and 0700 stay private whatever the umask is. The node process also sets umask 077 at start
(`node.run_node`), which covers the files SQLite and pysyncobj create themselves.
"""

from __future__ import annotations

import os
import stat

FILE_MODE = 0o600
DIR_MODE = 0o700
# The bits that let anyone but the owner read, write or enter.
OTHERS = stat.S_IRWXG | stat.S_IRWXO


def make_private_dirs(path: str | os.PathLike[str]) -> None:
    """Create `path` and every missing parent with mode 0700, and tighten `path` itself
    if it exists already (see `tighten`).

    Unlike `os.makedirs(path, 0o700)`, which gives the mode to the last directory only
    and makes the parents it creates with the umask's default (0755 under umask 022).
    Parents that exist already are left alone (they may be `/var/lib` or a home)."""
    path = os.path.abspath(os.fspath(path))
    missing = []
    probe = path
    while not os.path.isdir(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
    tighten(path)


def tighten(path: str | os.PathLike[str]) -> None:
    """Take away every permission of the group and others from an existing file or
    directory (the owner's stay as they are). Nothing when it is private already, or
    when it belongs to another user (only its owner may change its mode: such a path is
    not ours to decide on)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & OTHERS or st.st_uid != os.geteuid():
        return
    os.chmod(path, stat.S_IMODE(st.st_mode) & ~OTHERS)


def open_private(path: str | os.PathLike[str], flags: int, *, exclusive: bool = False
                 ) -> int:
    """`os.open` creating the file with mode 0600. `exclusive`: the file must not exist
    (O_EXCL; a symlink planted at `path` is refused too). Otherwise an existing file is
    opened and tightened to 0600 through its descriptor (it may be from an older build
    that made 0644 files)."""
    flags |= os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    if exclusive:
        flags |= os.O_EXCL
    fd = os.open(path, flags, FILE_MODE)
    if not exclusive:
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) & OTHERS:
                os.fchmod(fd, FILE_MODE)
        except BaseException:
            os.close(fd)
            raise
    return fd


def write_private(path: str | os.PathLike[str], data: str | bytes, *,
                  exclusive: bool = False) -> None:
    """Write `data` (text as UTF-8) into `path`, mode 0600 (see `open_private`)."""
    raw = data.encode() if isinstance(data, str) else data
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC, exclusive=exclusive)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)


def create_private_empty(path: str | os.PathLike[str]) -> None:
    """Create an empty file `path` (mode 0600) that must not exist yet.

    For files another library fills: SQLite makes a new database with mode 0644 minus
    the umask, but keeps the mode of an existing (empty) file and gives its journal and
    WAL files the mode of the database."""
    os.close(open_private(path, os.O_WRONLY, exclusive=True))
