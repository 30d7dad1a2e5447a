"""The JupyterLab helper waits for the server to answer, not for a log line: jupyter_server logs
its "ready" line before it binds its port, so a first request can be refused (it failed CI)."""

import socket
import subprocess
import sys
import textwrap

import pytest

from mha_lib.book import lab


def _server(script: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)])


def test_waits_until_a_server_that_binds_late_answers(tmp_path):
    port = lab._free_port()
    # The server starts listening only once the first connection has been refused: the state the
    # browser tests met, reached without a sleep.
    server = _server(f"""
        import http.server, socket
        class Status(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers(); self.wfile.write(b"{{}}")
            def log_message(self, *args):
                pass
        open({str(tmp_path / 'started')!r}, 'w').close()
        while not __import__('os').path.exists({str(tmp_path / 'refused')!r}):
            pass
        http.server.HTTPServer(("127.0.0.1", {port}), Status).handle_request()
        """)
    try:
        while not (tmp_path / "started").exists():
            assert server.poll() is None
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port)).close()
        (tmp_path / "refused").touch()
        lab._until_it_answers(server, f"http://127.0.0.1:{port}/api/status", 60, tmp_path / "log")
    finally:
        server.kill()
        server.wait()


def test_a_server_that_exits_ends_the_wait_with_its_log(tmp_path):
    (tmp_path / "log").write_text("the server's last words\n")
    server = _server("raise SystemExit(3)")
    with pytest.raises(RuntimeError, match="exited with code 3:\nthe server's last words"):
        lab._until_it_answers(server, f"http://127.0.0.1:{lab._free_port()}/api/status", 60,
                              tmp_path / "log")
