"""A canned OpenAI-style server on 127.0.0.1: replies with the bytes a test gives it."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web


@dataclass
class CannedServer:
    """Answers the n-th POST with replies[n % len(replies)]: byte pieces written in turn."""

    replies: list[list[bytes]] = field(default_factory=list)
    url: str = ""
    requests: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        pieces = self.replies[self.requests % len(self.replies)]
        self.requests += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            await asyncio.sleep(0.002)
        await response.write_eof()
        return response


@pytest.fixture
def canned_server() -> Iterator[CannedServer]:
    server = CannedServer()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", server.handle)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    loop.run_until_complete(web.SockSite(runner, sock).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield server
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()
