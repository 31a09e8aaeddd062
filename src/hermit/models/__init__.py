"""Model adapters behind one interface: the agent loop sees `Model`, requests and responses only."""

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
