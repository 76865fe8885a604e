"""SGLang version numbers, and the protocol features that depend on them (docs/sglang.md, Versions)."""

from __future__ import annotations

import re

SPEC_DETAILS_SINCE = (0, 5, 19)  # `return_spec_tokens_details` on the OpenAI routes
_VERSION = re.compile(r"\s*v?(\d+(?:\.\d+)*)")


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """``"0.5.19.post1"`` -> ``(0, 5, 19)``; None when there is no leading number."""
    if not text:
        return None
    match = _VERSION.match(text)
    if match is None:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def supports_spec_details(version: str | None) -> bool:
    """Whether an SGLang server of ``version`` accepts ``return_spec_tokens_details``."""
    parsed = version_tuple(version)
    return parsed is not None and parsed >= SPEC_DETAILS_SINCE
