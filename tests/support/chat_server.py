"""A fake OpenAI-compatible chat-completions server for tests: a real HTTP server on 127.0.0.1 that records
what it is sent and answers as it is told (labels by line text, an HTTP status, garbage, or no answer
until it is closed)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    """Answers each chat-completions request with a label for every line it is asked about whose
    quotation contains a key of ``speakers`` (the value is the speaker it names), unless ``status``,
    ``content`` or ``hang`` say otherwise."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.speakers: dict[str, str] = {}
        self.confidence: float | None = 0.8
        self.status = 200
        self.content: str | None = None  # the message content to answer instead of the labels
        self.hang = False  # answer nothing until close (a client's timeout fires first)
        self.released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append((dict(self.headers), body))
                if server.hang:
                    server.released.wait()
                    return
                answer = json.dumps(server.answer(body)).encode()
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/chat/completions"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def asked(self) -> list[dict[str, Any]]:
        """The lines of every request, in order: each ``{"id", "quotation", "context"}``."""
        return [line for _, body in self.requests for line in self.prompt(body)["lines"]]

    @staticmethod
    def prompt(body: dict[str, Any]) -> dict[str, Any]:
        prompt: dict[str, Any] = json.loads(body["messages"][-1]["content"])
        return prompt

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.status != 200:
            return {"error": {"message": "the model is not loaded"}}
        content = self.content
        if content is None:
            labels = []
            for line in self.prompt(body)["lines"]:
                for words, speaker in self.speakers.items():
                    if words in line["quotation"]:
                        label = {"id": line["id"], "speaker": speaker}
                        if self.confidence is not None:
                            label["confidence"] = self.confidence
                        labels.append(label)
            content = json.dumps({"labels": labels})
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
