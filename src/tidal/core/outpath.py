"""``--out`` checked before any work (issue 32 §11): a path a command will write, refused up
front with the reason rather than after minutes of simulation.

:func:`check_out_dir` is for an output directory (a run, a sweep, a plan), which is built as a
temporary sibling ``.NAME.tmp-XXXXXXXX`` and renamed into place (:mod:`tidal.core.io`);
:func:`check_out_file` for one output file (written through ``.NAME.XXXXXXXX.tmp``). Both
refuse: no name (``.``, ``..``, ``/``), a name whose temporary sibling would exceed the
file system's 255 bytes, a symbolic link at the path (a directory cannot be renamed onto it,
and a dangling one hides a typo), a path whose nearest existing ancestor is not a writable
directory, and the wrong kind of thing already there.
"""

from __future__ import annotations

import os
from pathlib import Path

from tidal.core.errors import ConfigError

NAME_MAX = 255
"""Bytes in one path component (ext4, xfs, btrfs, tmpfs, APFS)."""
TMP_EXTRA = len(".") + len(".tmp-") + 8
"""Bytes the temporary sibling ``.NAME.tmp-XXXXXXXX`` adds to NAME."""


def _name(path: Path, field: str, what: str) -> None:
    name = path.name
    if name in ("", ".", ".."):
        raise ConfigError(
            field,
            f"{str(path)!r} names no {what} of its own (it would replace its parent)",
            f"give a new {what} name, e.g. {Path(path, 'run') if name else 'out/run'}",
        )
    size = len(os.fsencode(name))
    if size + TMP_EXTRA > NAME_MAX:
        raise ConfigError(
            field,
            f"the name {name[:40]!r}… is {size} bytes; with its temporary sibling it would "
            f"exceed the file system's {NAME_MAX}-byte limit on a name",
            f"give a name of at most {NAME_MAX - TMP_EXTRA} bytes",
        )


def _writable_parent(path: Path, field: str) -> None:
    parent = path.parent
    while not parent.exists():
        if parent.is_symlink():
            raise ConfigError(field, f"{parent} is a dangling symbolic link", "fix or remove it")
        if parent == parent.parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(field, f"{parent} is not a directory", "give a path under a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(
            field, f"{parent} is not writable by this user", "give a path you may write to"
        )


def _symlink(path: Path, field: str) -> None:
    if path.is_symlink():
        target = os.readlink(path)
        state = "" if path.exists() else ", dangling"
        raise ConfigError(
            field,
            f"{path} is a symbolic link (to {target}{state}); results replace the path as a "
            "whole, which would replace the link, not what it points to",
            f"give the target itself ({path.resolve()}) or a new name",
        )


def check_out_dir(path: str | Path, field: str = "out", replaced: bool = True) -> Path:
    """``path`` as an output directory a run may create or replace (module docstring);
    ``replaced=False``: a directory written into, never replaced (a sweep's), which may be
    a symbolic link to a directory."""
    p = Path(path)
    _name(p, field, "directory")
    if replaced or not p.is_dir():
        _symlink(p, field)
    if p.exists() and not p.is_dir():
        raise ConfigError(field, f"{p} exists and is not a directory", "give a directory")
    _writable_parent(p, field)
    return p


def check_out_file(path: str | Path, field: str = "out") -> Path:
    """``path`` as an output file a command may create or replace (module docstring)."""
    p = Path(path)
    _name(p, field, "file")
    if p.is_dir():
        raise ConfigError(field, f"{p} is a directory", f"give a file path, e.g. {p / 'out.json'}")
    if p.is_symlink() and not p.exists():
        raise ConfigError(field, f"{p} is a dangling symbolic link", "fix or remove it")
    _writable_parent(p, field)
    return p
