"""An S3 protocol server on loopback for the archive tests: moto's server mode, and a TCP
proxy in front of it that cuts an upload mid-body.

``S3Server`` starts moto on 127.0.0.1 with a free port (stopped by ``close``); ``CuttingProxy``
forwards bytes both ways and, once a ``PUT`` request line naming ``cut_key`` passes, forwards
only half of what follows and then closes both sockets: the client sees its connection reset in
the middle of the body, as when a network fails mid-upload.  Every retry meets the same cut.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["BUCKET", "CuttingProxy", "S3Server", "s3_env", "s3_server"]

BUCKET = "penguin-archive"
# Credentials the fake server accepts; the archive must never write them anywhere
# (tests/support/secretkit.SUITE_SECRETS holds the secret one).
ACCESS_KEY = "AKIAPENGUINTEST00001"
SECRET_KEY = "s3cr3t-penguin-archive-test-key-0001"


def s3_env() -> dict[str, str]:
    """The environment an S3 client needs for the fake server (no real account)."""
    return {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


class S3Server:
    """moto's S3 server on ``127.0.0.1:<free port>``, with ``BUCKET`` created."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        self.port = port
        self.client().create_bucket(Bucket=BUCKET)

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
        )

    def objects(self) -> dict[str, bytes]:
        """Every object of ``BUCKET``: key -> bytes."""
        client = self.client()
        listed = client.list_objects_v2(Bucket=BUCKET).get("Contents", [])
        return {
            o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listed
        }

    def close(self) -> None:
        self._server.stop()


@contextlib.contextmanager
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    try:
        yield server
    finally:
        server.close()


class CuttingProxy:
    """A TCP proxy on ``127.0.0.1:<free port>`` to ``127.0.0.1:target_port`` that breaks every
    upload of a key containing ``cut_key`` half-way through its body."""

    def __init__(self, target_port: int, *, cut_key: str) -> None:
        self._target = target_port
        self._needle = b"PUT /" + BUCKET.encode() + b"/"
        self._cut_key = cut_key.encode()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self.cuts = 0
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(("127.0.0.1", self._target))
            for src, dst, watch in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(target=self._pipe, args=(src, dst, watch), daemon=True)
                t.start()
                self._threads.append(t)

    def _pipe(self, src: socket.socket, dst: socket.socket, watch: bool) -> None:
        seen = b""
        body_next = False  # the head of a cut request has passed: its body is next
        try:
            while data := src.recv(65536):
                if body_next:
                    dst.sendall(data[: len(data) // 2])  # half the body, then the link drops
                    self.cuts += 1
                    break
                if watch:
                    seen = (seen + data)[-8192:]
                    at = self._cut_at(seen)
                    if at is not None:
                        head_end = len(data) - (len(seen) - at)  # in ``data``
                        body = data[max(head_end, 0) :]
                        if body:
                            dst.sendall(data[: max(head_end, 0) + len(body) // 2])
                            self.cuts += 1
                            break
                        body_next = True
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _cut_at(self, seen: bytes) -> int | None:
        """Where the body of the last request in ``seen`` starts, when that request uploads
        the key to cut and its head is complete; else None."""
        start = seen.rfind(self._needle)
        if start < 0:
            return None
        line_end = seen.find(b"\r\n", start)
        head_end = seen.find(b"\r\n\r\n", start)
        if line_end < 0 or head_end < 0 or self._cut_key not in seen[start:line_end]:
            return None
        return head_end + 4

    def close(self) -> None:
        self._listener.close()
        self._accept.join(timeout=5)
