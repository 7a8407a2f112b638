"""Test-only fault injection, loaded by Python at start-up when this directory is on PYTHONPATH.

Once the file named by SLUICE_TEST_EIO_TRIGGER exists, fsync/fdatasync and positional writes on files
whose path contains SLUICE_TEST_EIO_DIR fail with EIO, as a dying disk would. Production code has no hook.
"""

from __future__ import annotations

import errno
import os

_trigger = os.environ.get("SLUICE_TEST_EIO_TRIGGER")
_where = os.environ.get("SLUICE_TEST_EIO_DIR")
# "fsync": only fsync/fdatasync fail (the write reached the page cache); "all": writes too.
_ops = os.environ.get("SLUICE_TEST_EIO_OPS", "all")


def _failing(real):  # type: ignore[no-untyped-def]
    def call(fd, *args):  # type: ignore[no-untyped-def]
        if _trigger and _where and os.path.exists(_trigger):
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                path = ""
            if _where in path:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, *args)

    return call


if _trigger:
    os.fsync = _failing(os.fsync)
    os.fdatasync = _failing(os.fdatasync)
    if _ops == "all":
        os.pwritev = _failing(os.pwritev)
        os.pwrite = _failing(os.pwrite)
