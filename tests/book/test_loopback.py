"""The loopback server the PDF printer, the site audit and the browser tests read the site from."""

from __future__ import annotations

import socket
import struct
import urllib.error
import urllib.request

import pytest

from mha_lib.book.loopback import serve


def test_it_serves_the_folder_and_stops(tmp_path):
    (tmp_path / "page.html").write_text("<p>café</p>", encoding="utf-8")
    with serve(tmp_path) as base:
        assert base.startswith("http://127.0.0.1:") and base.endswith("/")
        assert urllib.request.urlopen(base + "page.html").read().decode() == "<p>café</p>"
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(base + "missing.html")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(base + "page.html", timeout=5)


def test_a_dropped_connection_is_not_an_error(tmp_path, capfd):
    (tmp_path / "big.bin").write_bytes(bytes(16 << 20))
    with serve(tmp_path) as base:
        port = int(base.rsplit(":", 1)[1].strip("/"))
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        client.recv(1024)
        # closed at once with unread data: the server's next write fails (reset, broken pipe)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        assert urllib.request.urlopen(base + "big.bin").read(4) == bytes(4)  # still serving
    assert "Traceback" not in capfd.readouterr().err


def test_it_refuses_a_folder_that_is_not_there(tmp_path):
    with pytest.raises(ValueError, match="folder must be a directory to serve, got '.*nowhere'"):
        with serve(tmp_path / "nowhere"):
            pass
