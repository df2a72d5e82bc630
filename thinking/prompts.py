"""Thought prompts and the parser that splits a thought from its response.

    tp = ThoughtPrompt(ThoughtPromptConfig())          # the paper's generic prompt
    prompt = tp.build("Reverse 'abc'.")                # str, or chat messages with style="chat"
    out = tp.parse(completion_text)                    # ParsedOutput(thought, response, ok, error)

The model writes its thought after `thought_marker` and its response after
`response_marker`. The parser never guesses: an output without the response marker, with
an empty response, or with the response marker inside the thought (the thought marker
appears again after it, i.e. the "response" is more thinking) is unparsable, and the
reason is recorded. The direct-response baseline uses `DirectPrompt`: no markers, the
whole completion is the response.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from common.sampling import Prompt, prefilled

GENERIC = (
    "Respond to the following user query in a comprehensive and detailed way. You can write down your "
    "thought process before responding. Write your thoughts after \"{thought_marker}\" and write your "
    "response after \"{response_marker}\".\n\nUser query: {instruction}"
)
SPECIFIC = (
    "Respond to the following user query in a comprehensive and detailed way. But first write down your "
    "internal thoughts. This must include your draft response and its evaluation. After this, write your "
    "final response after \"{response_marker}\". Begin your thoughts with \"{thought_marker}\".\n\n"
    "User query: {instruction}"
)
TEMPLATES = {"generic": GENERIC, "specific": SPECIFIC}


@dataclass
class ThoughtPromptConfig:
    kind: Literal["generic", "specific", "custom"] = "generic"  # the paper's two prompts, or `template`
    template: str = ""  # kind=custom: must contain {instruction}, {thought_marker}, {response_marker}
    thought_marker: str = "Here is my thought process:"  # the thought follows this
    response_marker: str = "Here is my response:"  # the response follows this
    style: Literal["plain", "chat"] = "plain"  # plain text, or one user message (the chat template renders it)
    # the answer starts with the thought marker, written for the model (plain: the prompt's end;
    # chat: the assistant message the model continues): a model that never writes it yields nothing
    prefill_thought_marker: bool = True

    def __post_init__(self):
        if not self.thought_marker.strip() or not self.response_marker.strip():
            raise ValueError("thinking.prompt.thought_marker and response_marker must be non-empty")
        if self.thought_marker in self.response_marker or self.response_marker in self.thought_marker:
            raise ValueError(f"thinking.prompt: the markers {self.thought_marker!r} and {self.response_marker!r} "
                             "must not contain each other (the parser could not tell them apart)")
        text = self.text()
        for field in ("{instruction}", "{thought_marker}", "{response_marker}"):
            if field not in text:
                raise ValueError(f"thinking.prompt.template is missing {field}: the model must be told the "
                                 f"markers and given the instruction; add {field} to the template")

    def text(self) -> str:
        if self.kind == "custom":
            if not self.template:
                raise ValueError("thinking.prompt.template is empty but kind is 'custom': write a template or "
                                 "choose kind 'generic' or 'specific'")
            return self.template
        return TEMPLATES[self.kind]


@dataclass(frozen=True)
class ParsedOutput:
    thought: str  # "" for the direct baseline
    response: str  # what a judge sees; "" when unparsable
    ok: bool
    error: str = ""  # why it is unparsable


class ThoughtPrompt:
    """Builds thought prompts and parses the completions they produce."""

    thinks = True

    def __init__(self, cfg: ThoughtPromptConfig):
        self.cfg = cfg

    def build(self, instruction: str) -> Prompt:
        c = self.cfg
        body = c.text().format(instruction=instruction, thought_marker=c.thought_marker,
                               response_marker=c.response_marker)
        if c.style == "chat":
            messages = [{"role": "user", "content": body}]
            return prefilled(messages, c.thought_marker) if c.prefill_thought_marker else messages
        return body + "\n" + (c.thought_marker if c.prefill_thought_marker else "")

    def completion_text(self, text: str) -> str:
        """The full output as the parser sees it (prompts ending in the thought marker)."""
        if self.cfg.prefill_thought_marker:
            return self.cfg.thought_marker + text
        return text

    def parse(self, text: str) -> ParsedOutput:
        c = self.cfg
        full = self.completion_text(text)
        t = full.find(c.thought_marker)
        r = full.find(c.response_marker)
        if r < 0:
            return ParsedOutput("", "", False, "no response marker")
        if t < 0 or t > r:
            return ParsedOutput("", "", False, "no thought marker before the response marker")
        thought = full[t + len(c.thought_marker): r].strip()
        response = full[r + len(c.response_marker):]
        if c.thought_marker in response:
            return ParsedOutput("", "", False, "the response holds more thinking (thought marker after it)")
        if c.response_marker in response:
            return ParsedOutput("", "", False, "more than one response marker")
        response = response.strip()
        if not response:
            return ParsedOutput(thought, "", False, "empty response")
        return ParsedOutput(thought, response, True)


@dataclass
class DirectPromptConfig:
    template: str = "{instruction}"  # the direct baseline's prompt; must contain {instruction}
    style: Literal["plain", "chat"] = "plain"  # plain text, or one user message

    def __post_init__(self):
        if "{instruction}" not in self.template:
            raise ValueError("thinking.direct_prompt.template is missing {instruction}; add it")


class DirectPrompt:
    """The direct-response baseline: the whole completion is the response."""

    thinks = False

    def __init__(self, cfg: DirectPromptConfig):
        self.cfg = cfg

    def build(self, instruction: str) -> Prompt:
        body = self.cfg.template.format(instruction=instruction)
        return [{"role": "user", "content": body}] if self.cfg.style == "chat" else body

    def completion_text(self, text: str) -> str:
        return text

    def parse(self, text: str) -> ParsedOutput:
        response = text.strip()
        if not response:
            return ParsedOutput("", "", False, "empty response")
        return ParsedOutput("", response, True)
