"""Model adapters behind one interface: the agent loop sees `Model`, requests and responses only.

Names are resolved on first use (PEP 562), as in hermit.config: importing `hermit.models.base` (tools,
the agent's context) loads no provider client (httpx); only building a model does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermit.lazy import names_from

if TYPE_CHECKING:
    from hermit.models.anthropic import AnthropicModel
    from hermit.models.base import (
        Model,
        ModelProfile,
        ModelRequest,
        ModelResponse,
        ResponseDone,
        StreamEvent,
        TextDelta,
        ToolCallDelta,
        ToolSchema,
        final_response,
    )
    from hermit.models.openai_compat import OpenAIModel
    from hermit.models.registry import build_model, known_limits, model_profile, parse_model_ref

_WHERE = {
    "AnthropicModel": "anthropic", "Model": "base", "ModelProfile": "base", "ModelRequest": "base",
    "ModelResponse": "base", "ResponseDone": "base", "StreamEvent": "base", "TextDelta": "base",
    "ToolCallDelta": "base", "ToolSchema": "base", "final_response": "base", "OpenAIModel": "openai_compat",
    "build_model": "registry", "known_limits": "registry", "model_profile": "registry",
    "parse_model_ref": "registry",
}

__getattr__ = names_from(__name__, _WHERE)


__all__ = [
    "AnthropicModel",
    "Model",
    "ModelProfile",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "ResponseDone",
    "StreamEvent",
    "TextDelta",
    "ToolCallDelta",
    "ToolSchema",
    "build_model",
    "final_response",
    "known_limits",
    "model_profile",
    "parse_model_ref",
]
