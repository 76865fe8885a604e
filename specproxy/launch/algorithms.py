"""What SGLang knows about speculative algorithms, per release (docs/sglang.md, Speculative launch arguments).

Pure tables and lookups, used by preflight to tell an algorithm a server version does
not know, or a NEXTN/MTP label on a model without MTP layers, from a real
configuration. ``NEXTN`` is an alias SGLang resolves to ``EAGLE`` before anything else
reads it, so ``/server_info`` never shows it.
"""

from __future__ import annotations

from collections.abc import Iterable

from specproxy.core.protocol.versions import version_tuple

ALIASES = {"NEXTN": "EAGLE"}
_BASE = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "FROZEN_KV_MTP"})
_ADDED: tuple[tuple[tuple[int, int, int], str], ...] = (((0, 5, 20), "UNO"),)
_NEWEST_READ = (0, 5, 23)

# Target architectures whose own MTP/NextN layers SGLang drafts from with EAGLE/NEXTN
# (0.5.16-0.5.23 model configs; docs/sglang.md).
MTP_ARCHITECTURES = frozenset(
    {
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV4ForCausalLM",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",
        "GlmMoeDsaForCausalLM",
        "GlmOcrForConditionalGeneration",
        "LongcatFlashForCausalLM",
        "MiMoForCausalLM",
        "MiMoV2ForCausalLM",
        "Step3p5ForCausalLM",
        "Ernie4_5_MoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "ExaoneMoEForCausalLM",
        "NemotronHForCausalLM",
        "HYV3ForCausalLM",
        "HYV4ForCausalLM",
        "MistralLarge3ForCausalLM",
        "PixtralForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
    }
)
_MTP_PREFIXES = ("BailingMoe",)


def canonical_algorithm(name: str) -> str:
    """Upper-cased, aliases resolved: what ``/server_info`` reports for this launch flag."""
    upper = name.strip().upper()
    return ALIASES.get(upper, upper)


def known_algorithms(version: str | None) -> frozenset[str]:
    """Algorithm names a server of ``version`` accepts (the newest known set if unreadable)."""
    parsed = version_tuple(version) or _NEWEST_READ
    added = {name for since, name in _ADDED if parsed >= since}
    return _BASE | added


def accepted_names(version: str | None) -> frozenset[str]:
    """Names the launch flag accepts, aliases included."""
    return known_algorithms(version) | frozenset(ALIASES)


def supports_mtp(architectures: Iterable[str]) -> bool:
    """True when one of the target's architectures has MTP/NextN layers SGLang can draft from."""
    return any(a in MTP_ARCHITECTURES or a.startswith(_MTP_PREFIXES) for a in architectures)
