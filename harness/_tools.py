"""Tools: a plain Python function becomes something a model can call.

    @tool(needs_approval=True)
    async def transfer_funds(amount: float, to: str) -> dict:
        '''Transfer money to someone.

        Args:
            amount: How much, in euros.
            to: Who gets it.
        '''

The JSON schema of the input comes from the type hints (through pydantic), the
description from the docstring's first paragraph, and each parameter's
description from its ``Args:`` entry. The model's input is validated against
the same schema before the function runs; a mismatch is a tool error the model
sees, like an exception from the function.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_type_hints, overload

import pydantic

from ._model import ToolDefinition

__all__ = ["Tool", "ToolInputError", "tool"]

ToolFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]
ApprovalPolicy = bool | Callable[[Any], bool]


class ToolInputError(ValueError):
    """The model's input does not fit the tool's schema."""


@dataclass(frozen=True)
class Tool:
    """A tool the model may call.

    With ``execute`` it runs on the server; without it, it is a client tool: the
    model's call settles the turn and the browser answers it.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    execute: ToolFunction | None = None
    needs_approval: ApprovalPolicy = False
    recovery: Literal["report", "rerun"] = "report"
    input_model: type[pydantic.BaseModel] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.name):
            raise ValueError(f"tool name must be 1-64 characters of letters, digits, '_', '.', '-'; got {self.name!r}")
        if self.recovery not in ("report", "rerun"):
            raise ValueError(f"tool {self.name!r}: recovery must be 'report' or 'rerun', got {self.recovery!r}")

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, self.parameters)

    @property
    def is_client(self) -> bool:
        return self.execute is None

    def approval_needed(self, tool_input: Any) -> bool:
        if callable(self.needs_approval):
            return bool(self.needs_approval(tool_input))
        return bool(self.needs_approval)

    async def run(self, tool_input: Any) -> Any:
        if self.execute is None:
            raise RuntimeError(f"tool {self.name!r} has no server implementation")
        kwargs = self._arguments(tool_input)
        result = self.execute(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, pydantic.BaseModel):
            return result.model_dump(mode="json")
        return result

    def _arguments(self, tool_input: Any) -> dict[str, Any]:
        if tool_input is None:
            tool_input = {}
        if not isinstance(tool_input, dict):
            raise ToolInputError(f"tool {self.name!r} takes a JSON object, got {type(tool_input).__name__}")
        if self.input_model is None:
            return dict(tool_input)
        try:
            validated = self.input_model.model_validate(tool_input)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolInputError(f"invalid input for tool {self.name!r}: {problems}") from None
        return {name: getattr(validated, name) for name in type(validated).model_fields}


def _docstring_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph, and the ``Args:`` entries (Google style) of a docstring."""
    if not doc:
        return "", {}
    text = inspect.cleandoc(doc)
    summary = text.split("\n\n", 1)[0].strip().replace("\n", " ")
    params: dict[str, str] = {}
    match = re.search(r"^(?:Args|Arguments|Parameters):\s*$(.*?)(?:^\S|\Z)", text, re.M | re.S)
    if match:
        current = None
        for line in match.group(1).splitlines():
            entry = re.match(r"^\s{2,}(\w+)\s*(?:\([^)]*\))?:\s*(.*)$", line)
            if entry:
                current = entry.group(1)
                params[current] = entry.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
    return summary, params


def _input_model(fn: Callable[..., Any], name: str, param_docs: dict[str, str]) -> type[pydantic.BaseModel]:
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args and **kwargs cannot be described to a model")
        annotation = hints.get(pname, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, pydantic.Field(default, description=param_docs.get(pname)))
    model: type[pydantic.BaseModel] = pydantic.create_model(f"{name}_input", **fields)
    return model


def _schema(model: type[pydantic.BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def _make(fn: ToolFunction, name: str | None, description: str | None, needs_approval: ApprovalPolicy,
          recovery: Literal["report", "rerun"]) -> Tool:
    tool_name = name or fn.__name__
    summary, param_docs = _docstring_parts(fn.__doc__)
    model = _input_model(fn, tool_name, param_docs)
    return Tool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=_schema(model),
        execute=fn,
        needs_approval=needs_approval,
        recovery=recovery,
        input_model=model,
    )


@overload
def tool(fn: ToolFunction, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: ApprovalPolicy = False,
    recovery: Literal["report", "rerun"] = "report",
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    fn: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: ApprovalPolicy = False,
    recovery: Literal["report", "rerun"] = "report",
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a :class:`Tool` of a sync or async function (as a decorator, with or without options)."""
    if fn is not None:
        return _make(fn, name, description, needs_approval, recovery)
    return lambda f: _make(f, name, description, needs_approval, recovery)


def client_tool(name: str, description: str = "", parameters: dict[str, Any] | None = None) -> Tool:
    """A tool the browser runs: declared with a schema and no implementation."""
    return Tool(name=name, description=description, parameters=parameters or {"type": "object", "properties": {}})
