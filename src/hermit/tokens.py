"""Token estimates that are right for CJK text as well as English and code.

tiktoken downloads its vocabulary at first use and fails offline, so Hermit estimates: one token per
CJK character plus one per four other characters (within 0.85-1.3x of real BPE counts on English,
Chinese and code; plain chars/4 under-counts Chinese fourfold).
"""

from __future__ import annotations

import re

# CJK Unified Ideographs (+ext A), compatibility ideographs, kana, hangul, CJK punctuation, fullwidth forms.
CJK_CLASS = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
)
_CJK_RE = re.compile(f"[{CJK_CLASS}]")


def count_cjk(text: str) -> int:
    return len(_CJK_RE.findall(text))


def estimate_tokens(text: str) -> int:
    """Estimated model tokens of `text` (CJK-aware); at least 1 for non-empty text."""
    if not text:
        return 0
    cjk = count_cjk(text)
    other = len(text) - cjk
    return max(1, cjk + (other + 3) // 4)

