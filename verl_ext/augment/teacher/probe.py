"""A start-up check that the OpenAI-compatible teacher answers, so a wrong URL fails in seconds, not mid-run.

``probe_teacher`` asks ``GET {base_url}/models`` (vLLM, SGLang and OpenAI serve it) under a total deadline. An
unreachable server or a refused key raises ``TeacherUnreachableError`` with what to set; any other HTTP answer
means a server is there (some gateways do not serve ``/models``), and a model list without the configured model
is a warning, not an error (gateways list partially).
"""

from __future__ import annotations

import asyncio
import logging

import openai

from verl_ext.augment.config import TeacherConfig
from verl_ext.augment.teacher.openai_compat import api_key, make_async_client

logger = logging.getLogger(__name__)
BASE_URL_ENV = "TEACHER_BASE_URL"  # what the recipe's config reads heapa.teacher.base_url from


class TeacherUnreachableError(RuntimeError):
    """The teacher server cannot be used; the message says which setting to change."""


def probe_teacher(config: TeacherConfig) -> str:
    """Check the server behind ``config``; returns a one-line status or raises ``TeacherUnreachableError``."""
    return asyncio.run(_probe(config))


async def _probe(config: TeacherConfig) -> str:
    url = config.base_url
    client = make_async_client(config, config.probe_timeout_s)
    try:
        page = await asyncio.wait_for(client.models.list(), config.probe_timeout_s)
    except (asyncio.TimeoutError, openai.APITimeoutError):
        raise _unreachable(url, f"no answer within {config.probe_timeout_s:g} s") from None
    except openai.APIConnectionError as err:
        raise _unreachable(url, _cause(err)) from None
    except (openai.AuthenticationError, openai.PermissionDeniedError) as err:
        raise TeacherUnreachableError(_key_advice(config, err.status_code)) from None
    except openai.APIStatusError as err:
        return f"teacher at {url}: reachable (GET /models answered HTTP {err.status_code})"
    finally:
        await client.close()
    ids = [str(getattr(m, "id", "")) for m in getattr(page, "data", [])]
    if ids and config.model not in ids:
        logger.warning("teacher at %s does not list model %r (it lists %s); requests may fail with HTTP 404 "
                       "(set TEACHER_MODEL / heapa.teacher.model)", url, config.model, ids[:10])
    return f"teacher at {url}: reachable, {len(ids)} model(s) listed"


def _unreachable(url: str, why: str) -> TeacherUnreachableError:
    return TeacherUnreachableError(
        f"augmentation is on but the teacher at heapa.teacher.base_url={url} is not reachable ({why}). Start an "
        f"OpenAI-compatible server (e.g. `vllm serve <model> --port 8000`) and set {BASE_URL_ENV}="
        "http://<host>:<port>/v1, or train without it: heapa.augmentation.enabled=false (or "
        "heapa.teacher.backend=programmatic for the arithmetic task). heapa.teacher.probe_timeout_s=0 skips this "
        "check."
    )


def _key_advice(config: TeacherConfig, status: int) -> str:
    if not config.api_key_env:
        where = "heapa.teacher.api_key_env is empty, so no key is sent"
    elif api_key(config) is None:
        where = f"environment variable {config.api_key_env} (heapa.teacher.api_key_env) is not set"
    else:
        where = f"the key in {config.api_key_env} (heapa.teacher.api_key_env) was refused"
    return f"the teacher at heapa.teacher.base_url={config.base_url} answered HTTP {status}: {where}"


def _cause(err: BaseException) -> str:
    inner = err.__cause__ or err.__context__
    return f"{type(inner).__name__}: {inner}" if inner is not None else str(err)
