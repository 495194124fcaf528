"""What a server says over HTTP: /health, and the models /v1/models lists.

The one reader of /v1/models in the server stage (`list_models`); the supervisor's
readiness check and `attach` both use it.
"""

from __future__ import annotations

import functools
import ssl

import httpx

from workbench.errors import LaunchError

__all__ = ["list_models", "probe", "tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """For polls that repeat (probes, scrapes): built once, as loading the CA bundle
    costs ~15 ms of CPU each time httpx makes a client."""
    return httpx.create_ssl_context()


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _model_ids(response: httpx.Response) -> list[str]:
    data = response.json()
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError("no `data` list")
    return [str(m["id"]) for m in entries if isinstance(m, dict) and m.get("id")]


def list_models(base_url: str, *, api_key: str | None = None, timeout: float = 10.0,
                client: httpx.Client | None = None) -> list[str]:
    """The ids /v1/models lists (possibly none). LaunchError when nothing answers,
    a key is wanted, or the answer is not an OpenAI model list."""
    try:
        if client is not None:
            r = client.get(f"{base_url}/v1/models", headers=_headers(api_key), timeout=timeout)
        else:
            r = httpx.get(f"{base_url}/v1/models", headers=_headers(api_key), timeout=timeout, verify=tls_context())
    except httpx.HTTPError as exc:
        raise LaunchError(f"Nothing answers at {base_url} ({exc.__class__.__name__}: {exc}).",
                          hint="Check the URL and that the server is up (curl URL/health).") from exc
    if r.status_code == 401:
        raise LaunchError(f"{base_url} wants an API key.", hint="Pass the key the server was started with.")
    if r.status_code != 200:
        raise LaunchError(f"{base_url} answered /v1/models with HTTP {r.status_code}.",
                          hint="Is it a vLLM (OpenAI-compatible) server? Is its engine still starting?")
    try:
        return _model_ids(r)
    except ValueError as exc:
        raise LaunchError(f"{base_url}/v1/models is not an OpenAI model list ({exc}).",
                          hint="Is it a vLLM (OpenAI-compatible) server?") from exc


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
