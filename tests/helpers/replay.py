"""Serve recorded vLLM SSE streams to the openai SDK, with no server.

`ReplayTransport` is an httpx transport (sync and async) that answers each
POST to /v1/chat/completions or /v1/completions with the next recording in
its queue, byte for byte as vLLM sent it, and keeps every request body it
saw so a test can check what the client sent. GET /v1/models answers with
the model named in the first recording. Recordings come from a real vLLM
(tests/fixtures/vllm-*/); this module never makes up a stream.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from workbench.errors import WorkbenchError

__all__ = ["ReplayTransport", "RecordedRequest", "replay_async_client", "model_of_recording"]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    body: dict | None


def model_of_recording(sse: bytes) -> str:
    """The `model` field of the first chunk of an SSE recording."""
    for line in sse.splitlines():
        if line.startswith(b"data: {"):
            return json.loads(line[len(b"data: "):])["model"]
    raise WorkbenchError("The recording has no data chunk.",
                         hint="Pass a .sse file recorded from vLLM's streaming endpoint.")


@dataclass
class ReplayTransport(httpx.AsyncBaseTransport, httpx.BaseTransport):
    recordings: deque[bytes] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    model: str | None = None

    @classmethod
    def from_files(cls, paths: Iterable[str | Path]) -> ReplayTransport:
        recordings = deque(Path(p).read_bytes() for p in paths)
        model = model_of_recording(recordings[0]) if recordings else None
        return cls(recordings, [], model)

    def _respond(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append(RecordedRequest(request.method, request.url.path, body))
        if request.method == "GET" and request.url.path.endswith("/models"):
            data = [{"id": self.model, "object": "model", "owned_by": "vllm"}] if self.model else []
            return httpx.Response(200, json={"object": "list", "data": data})
        if request.method == "POST" and request.url.path.endswith(("/chat/completions", "/completions")):
            if not self.recordings:
                return httpx.Response(
                    500, json={"error": {"message": "replay: no recording left for this request"}})
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=self.recordings.popleft())
        return httpx.Response(404, json={"error": {"message": f"replay: no route {request.url.path}"}})

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        return self._respond(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return self._respond(request)


def replay_async_client(paths: Iterable[str | Path]) -> tuple[httpx.AsyncClient, ReplayTransport]:
    """An AsyncClient for `ChatSession(http_client=...)` that replays `paths` in order."""
    transport = ReplayTransport.from_files(paths)
    return httpx.AsyncClient(transport=transport), transport
