"""A reported prompt too small to be the prompt that was sent: a server that cut it silently (SPEC T3, L2, C10).

Why: Ollama (and servers built like it) answers a prompt longer than its context (`num_ctx`: 2,048 tokens by
default before Ollama 0.6, 4,096 after, whatever the model could take) without an error: it drops the start of the
prompt — the system prompt, the tool definitions, the early turns — and reports `usage.prompt_tokens` of what it
kept. The answer comes back as if nothing happened, from a model that no longer sees what it was told. And the T3
calibration would learn from that report a ratio the next honest report breaks (a segment from a cut report to a
whole one is priced at many tokens per estimated token), so every later count would be far too high.

A report is a cut prompt when it is under half of what the request holds by the most generous count the engine
knows (the C1 estimate without its images, whose 2,000 per image can exceed what a server charges, and with CJK
characters at half a token, as the most compact tokenizers count them; the tool definitions included as the
report includes them) and short of it by more than `MIN_GAP` tokens. Measured against exact o200k counts on the
shared transcripts, whole requests come out at 0.83x-1.30x of C1, so "under half" does not happen to an honest
report of ordinary traffic; degenerate text (long runs of one character or of spaces) can, which is why the
user is told "probably". The loop keeps the report as reported (labelled so), does not calibrate on it, and says
it once per session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mxclaw_nb.context.tokens import IMAGE_TOKENS, count_cjk, estimate_sent
from mxclaw_nb.messages import content_text, image_count
from mxclaw_nb.records import c1_estimate

__all__ = ["MIN_GAP", "Cut", "suspected_cut"]

MIN_GAP = 1_024  # tokens: a smaller shortfall is within what estimate error and request framing explain


@dataclass(frozen=True)
class Cut:
    """A call whose reported prompt is too small for what was sent (all figures in tokens)."""

    reported: int
    estimate: int  # C1 estimate of the request (est.), tool definitions included
    least: int  # the most generous count: no image tokens, CJK at half

    def payload(self, base_url: str) -> dict[str, Any]:
        """The provider.note a user reads once per session (with the figures, for SQL over events)."""
        return {"note": cut_note(self, base_url), "warning": True, "prompt_cut": True,
                "prompt_tokens_reported": self.reported, "estimate_tokens": self.estimate, "least_tokens": self.least}


def _least(message: dict[str, Any]) -> int:
    content = message.get("content")
    images = image_count(content)
    text = content if content.__class__ is str else content_text(content)
    return max(0, estimate_sent(message) - IMAGE_TOKENS * images - count_cjk(text) // 2)


def suspected_cut(view: Any, reported: int | None) -> Cut | None:
    """A `Cut` when the provider's reported prompt tokens cannot be the whole request `view` sent, else None.
    Cheap in the usual case: one comparison with the request's C1 estimate."""
    if not reported or reported <= 0:
        return None
    estimate = c1_estimate(view)
    if reported * 2 >= estimate or estimate - reported <= MIN_GAP:
        return None
    least = view.fixed_tokens + sum(_least(m) for m in view.messages)
    if reported * 2 >= least or least - reported <= MIN_GAP:
        return None
    return Cut(reported, estimate, least)


def cut_note(cut: Cut, base_url: str) -> str:
    """One paragraph: what was seen, what it probably means, what to do."""
    return (f"The provider at {base_url} reported {cut.reported:,} prompt tokens for a request of about "
            f"{cut.estimate:,} (est.): the server probably cut the prompt to its context length, as Ollama does past "
            "num_ctx, so the model did not see its start (system prompt, tool definitions, early turns). Raise the "
            "server's context (Ollama: OLLAMA_CONTEXT_LENGTH=32768, or PARAMETER num_ctx 32768 in a Modelfile) or "
            "lower the window to what it keeps (%agent config context_window_tokens=4096). Such reports are not "
            "used to calibrate token counts (T3); each such call's record says `prompt_cut`.")
