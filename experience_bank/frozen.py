"""The base of every bank record: strict, frozen pydantic models, their shared field types, and
the parser of untrusted JSON into any of them (docs/AUTHORIZER.md §2).

Strict means unknown keys, type coercion, NaN and inf are errors; the parser refuses duplicate
keys before validation, so a record has exactly one content hash, and reports any defect as one
BadInput line naming the field.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from experience_bank.errors import BadInput
from experience_bank.hashing import content_hash, loads_strict

Family = Literal["finance", "sql", "function"]
Method = Literal["sft", "grpo"]
Nu = Literal["continue", "restart", "none"]
Grade = Literal["A", "B", "C"]
Action = Literal["reject", "validate", "train"]
Role = Literal["candidate", "control"]
PromptFilter = Literal["reward_spread"]
Reward = Literal["execution", "ast_match", "numeric_match", "format", "placebo"]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
Ident = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    def content_hash(self) -> str:
        """sha256 of this record's canonical JSON."""
        return content_hash(self)


def omit_empty(*fields: str):
    """A wrap serializer that drops each of `fields` where it is empty, so a record written before
    the field existed keeps its bytes and hash."""
    def omit(self, handler):
        data = handler(self)
        if isinstance(data, dict):
            for field in fields:
                if not data.get(field):
                    data.pop(field, None)
        return data
    return omit


def one_line(exc: ValidationError, what: str) -> BadInput:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"]) or "(root)"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return BadInput(f"invalid {what}: field {loc}: {err['msg']}{more}")


def parse_model(cls: type[Frozen], text: str, what: str | None = None) -> Frozen:
    """Parse any record type from JSON text; BadInput on any defect, naming `what` (a noun or a path)
    where given, for a defect of the JSON as for one of its fields."""
    try:
        loads_strict(text)  # duplicate keys / NaN before validation
    except BadInput as exc:
        if what is None:
            raise
        raise BadInput(f"invalid {what}: {exc}") from None
    try:
        return cls.model_validate_json(text)
    except ValidationError as exc:
        raise one_line(exc, what or cls.__name__) from None
