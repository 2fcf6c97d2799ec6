"""What keeps a job away from its worker's credentials.

- The token comes from `--token-file` (mode 0600, refused when group or others can read
  it), so it is not in the worker's environment: `/proc/<pid>/environ` shows the
  environment a process was *started* with, and any process of the same uid can read it.
- `--run-as USER` (root only) runs shell jobs as that user, with its groups, `HOME`,
  `USER`, `LOGNAME` and `SHELL`: such a job cannot read the token file, the worker's
  `/proc/<pid>/environ` or its memory. A job that runs as the worker's own uid can read
  whatever the worker can read, token file included; that is what `--run-as` is for.
"""

from __future__ import annotations

import os
import pwd
import stat
from dataclasses import dataclass


class IsolationError(Exception):
    """A worker option that cannot be honoured (the worker exits 2 saying why)."""


MAX_TOKEN_BYTES = 4096


def read_token_file(path: str) -> str:
    """The token in `path` (surrounding whitespace stripped). Refused when the file is
    missing, empty, not a regular file, or readable or writable by group or others."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise IsolationError(f"cannot open token file {path!r}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IsolationError(f"token file {path!r} is not a regular file")
        if st.st_mode & 0o077:
            raise IsolationError(
                f"token file {path!r} has mode {stat.S_IMODE(st.st_mode):04o}: group and "
                f"others must not reach it (chmod 600 {path})")
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    token = data.decode("utf-8", errors="replace").strip()
    if not token or len(data) > MAX_TOKEN_BYTES or any(ch.isspace() for ch in token):
        raise IsolationError(f"token file {path!r} must hold one token on one line")
    return token


@dataclass(frozen=True, slots=True)
class RunAs:
    """The account shell jobs run as."""

    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    shell: str

    def env(self) -> dict[str, str]:
        return {"HOME": self.home, "USER": self.user, "LOGNAME": self.user,
                "SHELL": self.shell}


def resolve_run_as(user: str, *, euid: int | None = None) -> RunAs:
    """Look the user up; only root can start processes as another uid."""
    if (os.geteuid() if euid is None else euid) != 0:
        raise IsolationError("--run-as needs the worker to run as root")
    try:
        pw = pwd.getpwnam(user) if not user.isdigit() else pwd.getpwuid(int(user))
    except KeyError:
        raise IsolationError(f"--run-as: no such user {user!r}") from None
    if pw.pw_uid == 0:
        raise IsolationError("--run-as must name a user other than root")
    groups = tuple(sorted(set(os.getgrouplist(pw.pw_name, pw.pw_gid))))
    home = pw.pw_dir if pw.pw_dir and os.path.isdir(pw.pw_dir) else "/"
    return RunAs(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, home, pw.pw_shell or "/bin/sh")
