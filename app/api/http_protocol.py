"""uvicorn's HTTP protocol (httptools), answering requests it cannot parse with a problem
document instead of plain text: a bad Content-Length, conflicting framing headers, control
characters in a header or the path. The request never reaches the app, so nothing changes;
the caller still gets the same kind of error document as for every other 4xx."""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.api.problems import MALFORMED_HTTP, PROBLEM_MEDIA_TYPE


class ProblemHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(
            {
                "type": MALFORMED_HTTP.uri,
                "title": MALFORMED_HTTP.title,
                "status": 400,
                "detail": f"the HTTP request could not be parsed: {msg}",
            }
        ).encode()
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: " + PROBLEM_MEDIA_TYPE.encode() + b"\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()
