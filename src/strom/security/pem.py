"""PEM text given inline in a config value, made readable by OpenSSL again.

A properties file's continuation lines are joined without line breaks (``key=-----BEGIN ...\\``
then the base64 lines, each ending in ``\\``), and Spark options or environment variables often
carry PEM on one line. Kafka's Java PEM reader accepts such text; OpenSSL does not ("no start
line"). :func:`rewrap_pem` puts each block back into the standard shape. The broker (listener
TLS settings) and the client (``ssl.truststore.certificates``, ``ssl.keystore.key``,
``ssl.keystore.certificate.chain``) both use it.

:func:`key_material_path` hands key material held in memory to :mod:`ssl`, which reads files
only, without writing it to a disk: on Linux through an anonymous memory file (``memfd``) seen at
``/proc/self/fd/N``; elsewhere through a private temporary file (mode 0600) removed at once.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator

__all__ = ["key_material_path", "rewrap_pem"]

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.DOTALL)


def rewrap_pem(text: str) -> str:
    """PEM blocks with their base64 re-wrapped at 64 columns, one per line. PEM text in a config
    value often lost its line breaks (a properties file's continuation lines are joined), which
    Kafka accepts and OpenSSL does not. Blocks with RFC 1421 headers are kept as they are.
    Text without any PEM block is returned unchanged."""
    blocks = []
    for m in _PEM_BLOCK.finditer(text):
        label, body = m.group(1), m.group(2)
        if ":" in body:
            blocks.append(m.group(0).strip() + "\n")
            continue
        b64 = "".join(body.split())
        lines = [b64[i : i + 64] for i in range(0, len(b64), 64)]
        blocks.append("\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"]) + "\n")
    return "".join(blocks) if blocks else text


@contextlib.contextmanager
def key_material_path(data: bytes) -> Iterator[str]:
    """A path :mod:`ssl` can read ``data`` from while the ``with`` block runs. Private keys never
    reach a disk on Linux (memfd); elsewhere a 0600 temporary file holds them briefly."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("strom-key-material", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="strom-tls-", suffix=".pem")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
