"""The base of every replicated command (`Command`), and the helpers that keep a command
encoded as the previous build encoded it while it uses no field added since (a rolling
upgrade; core.protocol). The commands are in `client_commands`, `leader_commands` and
`worker_commands`; their codec is `core.commands`."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class Command:
    TYPE: ClassVar[str] = ""
    LEADER_ONLY: ClassVar[bool] = False

    def args(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def _args_without_defaults(self, *names: str) -> dict[str, Any]:
        """`args()` without the named fields while they hold their default: an entry that
        does not use a field added later stays readable by a build without it (a rolling
        upgrade; core.protocol)."""
        out = Command.args(self)
        for name in names:
            if out[name] == field_default(type(self), name):
                del out[name]
        return out


def field_default(cls: type[Command], name: str) -> Any:
    """The default of field `name` of command class `cls` (MISSING when it has none)."""
    for f in fields(cls):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
            return MISSING
    raise KeyError(name)


def without_none(cmd: Command, *names: str) -> dict[str, Any]:
    """`cmd.args()` without the named fields while they are None: an entry that does not
    use a field added later encodes as it did before it (a build without the field reads
    it during a rolling upgrade)."""
    out = Command.args(cmd)
    for name in names:
        if out[name] is None:
            del out[name]
    return out
