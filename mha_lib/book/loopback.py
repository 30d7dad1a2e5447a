"""A quiet HTTP server on 127.0.0.1 over a folder: the built website as a browser reads it.

Used by the PDF printer (:mod:`mha_lib.book.pdf`), the site audit
(:mod:`mha_lib.book.site_audit`) and the browser tests. Requests are not logged, and a browser
that drops a connection half-way through a file (a page closed while it loads) is not an error.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["serve"]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # broken pipe, reset by the browser
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serve(folder: str | Path) -> Iterator[str]:
    """The address of a server over ``folder`` (``http://127.0.0.1:PORT/``) while the block runs.

    Example: ``with serve("_build/html") as base: page.goto(base + "intro.html")``.

    Raises:
        ValueError: ``folder`` is not a directory.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be a directory to serve, got {str(folder)!r}")
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
