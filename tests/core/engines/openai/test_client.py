"""The client's TLS: a server whose certificate does not verify is refused in one line (the
check cannot be turned off)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from http.server import ThreadingHTTPServer

import pytest

from llm_lens.core.engines.openai.client import Endpoint, ServerError

from .fake_server import Fake, handler_for


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_a_self_signed_certificate_is_refused(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(Fake()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/v1"
        with pytest.raises(ServerError, match="TLS certificate did not verify"):
            Endpoint(url, "sk-secret", 5.0).get_json("models")
    finally:
        server.shutdown()
        server.server_close()
