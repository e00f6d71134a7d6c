"""Git repositories served over git's smart HTTP protocol on loopback, as a forge serves them:
each request handed to `git http-backend` (CGI) by a small threaded WSGI server."""

import os
import subprocess
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from socketserver import ThreadingMixIn


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _app(root):
    def app(environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": environ.get("HTTP_CONTENT_ENCODING", ""),
            "GIT_PROTOCOL": environ.get("HTTP_GIT_PROTOCOL", ""),
            "REMOTE_ADDR": "127.0.0.1",
        }
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, rest = out.partition(b"\r\n\r\n")
        if not rest and b"\n\n" in out:
            head, _, rest = out.partition(b"\n\n")
        status, headers = "200 OK", []
        for line in head.decode().splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = value.strip()
            elif name:
                headers.append((name.strip(), value.strip()))
        start_response(status, headers)
        return [rest]
    return app


class GitServer:
    """Serves the bare repositories under `root` (`<root>/<owner>/<name>.git`) at `url`."""

    def __init__(self, root):
        self.root = root
        self._server = make_server("127.0.0.1", 0, _app(root), server_class=_Threading, handler_class=_Quiet)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()


def git(cwd, *args):
    """Runs git in `cwd` (as a developer named dev); its output."""
    return subprocess.run(
        ["git", "-c", "user.name=dev", "-c", "user.email=dev@example.com", "-c", "init.defaultBranch=main", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout
