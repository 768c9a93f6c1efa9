"""Which endpoint serves a session: the configured provider, or the offline demo server (SPEC L2).

Why a module of its own: the provider adapter speaks to any OpenAI-compatible URL and knows nothing of the demo;
the demo server is an adapter too. Choosing between them (and starting the demo server on first use) is
composition, so it lives here, above both, where the agent, the CLI and the probes find it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from mxclaw_nb.provider.client import DEMO_LABEL, OpenAIProvider
from mxclaw_nb.settings import DEMO_MODEL

__all__ = ["demo_provider", "demo_server_url", "resolve_provider"]

_demo_lock = threading.Lock()
_demo_server: Any = None


def demo_server_url() -> str:
    """Base URL of this process's demo server, started on first use (127.0.0.1, daemon thread)."""
    global _demo_server
    with _demo_lock:
        if _demo_server is None:
            from mxclaw_nb.demo.server import TestServer

            _demo_server = TestServer(demo=True).start()
        return str(_demo_server.base_url)


def demo_provider(**kw: Any) -> OpenAIProvider:
    """Provider for the offline demo model (served once per process on 127.0.0.1), labelled as a demo."""
    kw.setdefault("label", DEMO_LABEL)
    return OpenAIProvider(base_url=demo_server_url(), api_key="demo", model=DEMO_MODEL, is_demo=True, **kw)


def resolve_provider(*, model: str | None = None, base_url: str | None = None, api_key: str | None = None,
                     env: Mapping[str, str] = os.environ, **kw: Any) -> OpenAIProvider:
    """Provider from arguments, else OPENAI_API_KEY / OPENAI_BASE_URL / MXCLAW_MODEL; nothing set -> demo."""
    model = model or env.get("MXCLAW_MODEL") or None
    base_url = base_url or env.get("OPENAI_BASE_URL") or None
    api_key = api_key or env.get("OPENAI_API_KEY") or None
    if model == DEMO_MODEL or (api_key is None and base_url is None):
        return demo_provider(**kw)
    if model is None and base_url is None:
        model = "gpt-4o-mini"
    return OpenAIProvider(base_url=base_url, api_key=api_key, model=model or "", **kw)
