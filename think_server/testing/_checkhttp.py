"""The HTTP calls of ``think-server check``, in one place (the kit's HTTP client will take them over)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["CheckHttp", "HttpAnswer"]


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: Any
    headers: httpx.Headers
    url: str

    def brief(self) -> str:
        text = json.dumps(self.body, ensure_ascii=False)
        return f"{self.status} {text if len(text) <= 160 else text[:157] + '...'}"


class CheckHttp:
    """GETs of ``get-messages`` with the bearer token, answered as (status, JSON or text, headers)."""

    def __init__(self, *, token: str | None, timeout: float) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def close(self) -> None:
        await self._client.aclose()

    async def get_messages(self, instance_url: str, params: dict[str, str] | None = None) -> HttpAnswer:
        return await self.get(instance_url.rstrip("/") + "/get-messages", params)

    @staticmethod
    def join(base: str, reference: str) -> str:
        """A ``Link`` target (relative or absolute) resolved against the URL it came with."""
        return str(httpx.URL(base).join(reference))

    async def get(self, url: str, params: dict[str, str] | None = None) -> HttpAnswer:
        response = await self._client.get(url, params=params)
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        return HttpAnswer(response.status_code, body, response.headers, str(response.url))
