"""What a server says over HTTP: /health, and the models /v1/models lists.

The one reader of /v1/models (`parse_model_list`, fetched by `served_models`,
`aserved_models`, `list_models`): the supervisor's readiness check, `attach`, the chat
turn and the benchmark all use it.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from workbench.errors import LaunchError

__all__ = ["ServedModel", "aserved_models", "list_models", "parse_model_list", "probe", "served_models", "tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """For polls that repeat (probes, scrapes): built once, as loading the CA bundle
    costs ~15 ms of CPU each time httpx makes a client."""
    return httpx.create_ssl_context()


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass(frozen=True)
class ServedModel:
    """One entry of /v1/models: the name requests use, and vLLM's max_model_len when it says."""

    id: str
    max_model_len: int | None = None


def parse_model_list(payload: object) -> list[ServedModel]:
    """The entries of an OpenAI model list (possibly none); ValueError when it is not one."""
    entries = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(entries, list):
        raise ValueError("no `data` list")
    served = []
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("id"):
            continue
        if not isinstance(entry["id"], str):
            raise ValueError(f"a model id is {entry['id']!r}, not text")
        length = entry.get("max_model_len")
        served.append(ServedModel(entry["id"], length if isinstance(length, int) and length > 0 else None))
    return served


def _checked_models(base_url: str, status: int, read_json: Callable[[], object]) -> list[ServedModel]:
    if status == 401:
        raise LaunchError(f"{base_url} wants an API key.", hint="Pass the key the server was started with.")
    if status != 200:
        raise LaunchError(f"{base_url} answered /v1/models with HTTP {status}.",
                          hint="Is it a vLLM (OpenAI-compatible) server? Is its engine still starting?")
    try:
        return parse_model_list(read_json())
    except ValueError as exc:
        raise LaunchError(f"{base_url}/v1/models is not an OpenAI model list ({exc}).",
                          hint="Is it a vLLM (OpenAI-compatible) server?") from exc


def _unreachable(base_url: str, exc: Exception) -> LaunchError:
    return LaunchError(f"Nothing answers at {base_url} ({exc.__class__.__name__}: {exc}).",
                       hint="Check the URL and that the server is up (curl URL/health).")


def served_models(base_url: str, *, api_key: str | None = None, timeout: float = 10.0,
                  client: httpx.Client | None = None) -> list[ServedModel]:
    """What /v1/models lists (possibly nothing). LaunchError when nothing answers,
    a key is wanted, or the answer is not an OpenAI model list."""
    try:
        if client is not None:
            r = client.get(f"{base_url}/v1/models", headers=_headers(api_key), timeout=timeout)
        else:
            r = httpx.get(f"{base_url}/v1/models", headers=_headers(api_key), timeout=timeout, verify=tls_context())
    except httpx.HTTPError as exc:
        raise _unreachable(base_url, exc) from exc
    return _checked_models(base_url, r.status_code, r.json)


async def aserved_models(base_url: str, *, api_key: str | None = None, timeout: float = 10.0,
                         client: httpx.AsyncClient | None = None) -> list[ServedModel]:
    """`served_models` for async callers (the chat turn)."""
    try:
        if client is not None:
            r = await client.get(f"{base_url}/v1/models", headers=_headers(api_key), timeout=timeout)
        else:
            async with httpx.AsyncClient(verify=tls_context()) as own:
                r = await own.get(f"{base_url}/v1/models", headers=_headers(api_key), timeout=timeout)
    except httpx.HTTPError as exc:
        raise _unreachable(base_url, exc) from exc
    return _checked_models(base_url, r.status_code, r.json)


def list_models(base_url: str, *, api_key: str | None = None, timeout: float = 10.0,
                client: httpx.Client | None = None) -> list[str]:
    """The ids /v1/models lists (possibly none); errors as `served_models`."""
    return [m.id for m in served_models(base_url, api_key=api_key, timeout=timeout, client=client)]


def probe(base_url: str, model: str, api_key: str | None, timeout: float = 2.0) -> tuple[int | None, bool]:
    """(/health status or None if unreachable, `model` listed in /v1/models)."""
    with httpx.Client(timeout=timeout, verify=tls_context()) as client:
        try:
            health = client.get(f"{base_url}/health").status_code
        except httpx.HTTPError:
            return None, False
        if health != 200:
            return health, False
        try:
            listed = model in list_models(base_url, api_key=api_key, timeout=timeout, client=client)
        except LaunchError:
            listed = False
    return health, listed
